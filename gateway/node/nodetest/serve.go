package nodetest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ServeOptions shape a `tether serve` process; the zero value serves a
// new t.TempDir() on an ephemeral port of 127.0.0.1, with the flags'
// defaults (so it accepts no token: Args usually has --jwt-secret Secret
// or --dev-tokens).
type ServeOptions struct {
	// Dir is --data; default a new t.TempDir(). A test restarts a node by
	// starting another process on the Dir of one it stopped.
	Dir string
	// Listen is --listen; default 127.0.0.1:0.
	Listen string
	// Args are more flags, after --listen and --data (so a later --data
	// in them wins).
	Args []string
	// Env are KEY=value variables added to Environ.
	Env []string
	// Command makes the exec.Cmd (default exec.Command), e.g. one that
	// runs the binary inside a network namespace.
	Command func(name string, args ...string) *exec.Cmd
	// NoWait returns as soon as the process started; the test then waits
	// with WaitListening or WaitLog (e.g. after starting several nodes
	// that must find each other before any listens).
	NoWait bool
}

// listenWait is how long StartServe waits for the listening line: a node
// on a loaded machine opens its store and listens well within it.
const listenWait = 30 * time.Second

// listenRE finds the listening line in either log format (text, json);
// its address is the first submatch or the second.
var listenRE = regexp.MustCompile(`msg=listening addr=(\S+)|"msg":"listening".*?"addr":"([^"]+)"`)

// Proc is a running process whose stderr (its log) is kept: for waiting
// on lines, and for failure messages. It is killed when the test ends if
// it still runs; a test that wants the graceful path calls Stop first.
type Proc struct {
	// Cmd is the started command.
	Cmd *exec.Cmd
	// Dir is the data directory of a `tether serve`; else "".
	Dir string
	// Addr is the host:port the process listens on, once WaitListening
	// (or StartServe) saw it logged.
	Addr string

	mu     sync.Mutex
	stderr bytes.Buffer
	change chan struct{} // closed and replaced on each new stderr line

	exited  chan struct{} // closed once Wait returned
	waitErr error         // Wait's error, set before exited is closed
}

// Environ is the test's environment without any TETHER_* variable, so
// that a developer's shell cannot change what a test's process does.
func Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") {
			env = append(env, kv)
		}
	}
	return env
}

// StartServe starts `tether serve` (Binary) as o says, in the Environ
// with o.Env, and, unless o.NoWait, waits up to 30 s for its
// listening line (Addr). It fails the test if the process does not start
// or exits or does not listen in time, with the process's log.
func StartServe(t testing.TB, o ServeOptions) *Proc {
	t.Helper()
	listen, dir, command := o.Listen, o.Dir, o.Command
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	if dir == "" {
		// Made before the process's cleanup is registered, so removed
		// after the process is gone (cleanups run last first).
		dir = t.TempDir()
	}
	if command == nil {
		command = exec.Command
	}
	args := append([]string{"serve", "--listen", listen, "--data", dir}, o.Args...)
	cmd := command(Binary(t), args...)
	cmd.Env = append(Environ(), o.Env...)
	p := StartCmd(t, cmd)
	p.Dir = dir
	if !o.NoWait {
		if err := p.WaitListening(listenWait); err != nil {
			p.Stop(0)
			t.Fatalf("nodetest: tether %v: %v\nstderr:\n%s", args[1:], err, p.Stderr())
		}
	}
	return p
}

// StartCmd starts any command as a Proc whose stderr is kept (a test's
// agent, say); it is killed when the test ends if it still runs. The
// caller sets cmd's environment (Environ) and must not set its Stderr.
func StartCmd(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, change: make(chan struct{}), exited: make(chan struct{})}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatalf("nodetest: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("nodetest: start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() { p.Stop(0) })
	go p.readLog(pipe)
	return p
}

// readLog keeps the process's stderr line by line, waking the waiters on
// each, and reaps the process once stderr is closed.
func (p *Proc) readLog(pipe io.Reader) {
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.stderr.Write(sc.Bytes())
		p.stderr.WriteByte('\n')
		close(p.change)
		p.change = make(chan struct{})
		p.mu.Unlock()
	}
	// A line longer than the buffer ends the scan; the rest is drained so
	// that the process never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, pipe)
	p.waitErr = p.Cmd.Wait()
	close(p.exited)
}

// Stderr is everything the process logged so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// WaitLog waits up to timeout for a stderr line matching re and returns
// it; it fails if the process exits first without having logged one.
func (p *Proc) WaitLog(re *regexp.Regexp, timeout time.Duration) (string, error) {
	match := func(text string) (string, bool) {
		for _, l := range strings.Split(text, "\n") {
			if re.MatchString(l) {
				return l, true
			}
		}
		return "", false
	}
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		text, ch := p.stderr.String(), p.change
		p.mu.Unlock()
		if l, ok := match(text); ok {
			return l, nil
		}
		select {
		case <-ch:
		case <-p.exited:
			// One last look: the final lines may have come with the exit.
			if l, ok := match(p.Stderr()); ok {
				return l, nil
			}
			return "", fmt.Errorf("process exited (%v) before logging a line matching %s", p.waitErr, re)
		case <-deadline:
			return "", fmt.Errorf("no line matching %s logged within %v", re, timeout)
		}
	}
}

// WaitListening waits up to timeout for the listening line of `tether
// serve` (text or JSON log) and sets Addr to its address.
func (p *Proc) WaitListening(timeout time.Duration) error {
	line, err := p.WaitLog(listenRE, timeout)
	if err != nil {
		return err
	}
	m := listenRE.FindStringSubmatch(line)
	p.Addr = m[1] + m[2]
	return nil
}

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exited is closed once the process has exited and been reaped; Err and
// Cmd.ProcessState are then set.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit as exec.Cmd.Wait reported it, once Exited is
// closed; nil before.
func (p *Proc) Err() error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
		return nil
	}
}

// Stop stops the process if it still runs and returns once it is gone:
// with SIGTERM (the graceful path) and SIGKILL if it has not exited
// within grace, or with SIGKILL at once when grace is 0. Stopping a
// stopped process does nothing.
func (p *Proc) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	if grace > 0 {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			return
		case <-time.After(grace):
		}
	}
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}
