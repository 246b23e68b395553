package bench

// The idle clients of BenchmarkScale and TestScaleHarness live in child
// processes: one process cannot hold 18,000 sockets besides its other
// files (the hard limit here is 20,000), and one source address has
// about 28,000 ephemeral ports, too few for 18,000 sessions that all
// reconnect at once. Each child is this test binary run again with
// TETHER_SCALE_CLIENT set (TestMain checks it before running any test),
// dials from a loopback address of its own (127.0.0.2, 127.0.0.3, …)
// and talks to the parent through a line protocol on stdin and stdout:
//
//	parent → child   child → parent
//	open             ready <opened> <ms>     (sessions opened, each with one exchange)
//	storm            storm <ms> <failed>     (every session closed and resumed at once;
//	                                          ms until the last session frame)
//
// A child exits as soon as its stdin closes: the parent is its owner,
// and a parent that dies closes the pipe too.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The child's environment: scaleClientEnv marks a child, the others
// carry its parameters.
const (
	scaleClientEnv  = "TETHER_SCALE_CLIENT"
	scaleURLEnv     = "TETHER_SCALE_URL"
	scaleTokenEnv   = "TETHER_SCALE_TOKEN"
	scaleCountEnv   = "TETHER_SCALE_CHILD_SESSIONS"
	scaleSourceEnv  = "TETHER_SCALE_SOURCE"
	scaleOpenersEnv = "TETHER_SCALE_OPENERS"
)

// scaleOpeners is how many sessions one child opens at a time: enough to
// keep the server's group commit busy, few enough that the hellos do not
// queue behind each other for seconds.
const scaleOpeners = 32

// scaleClient is a child's state: its sessions and how it dials.
type scaleClient struct {
	url, tok string
	dialer   *websocket.Dialer
	sessions []*idleSession
	openers  int
}

// idleSession is one session of a child, connected and idle, with a
// reader that keeps answering the server's WebSocket pings (gorilla
// answers them only inside a read).
type idleSession struct {
	id      string
	lastSeq uint64
	ws      *websocket.Conn
	done    chan struct{} // closed when the reader has returned
}

// scaleSessionFrame is the part of the session frame a resume is judged by.
type scaleSessionFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Resumed   bool   `json:"resumed"`
	Reason    string `json:"reason"`
	LastSeq   uint64 `json:"last_seq"`
}

// scaleClientMain is a child's main: it returns the exit code.
func scaleClientMain() int {
	c, err := newScaleClient()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale client:", err)
		return 2
	}
	// The commands come from a reader of their own so that a closed stdin
	// ends the process at once, even in the middle of an open or a storm.
	cmds := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
		os.Exit(0)
	}()
	for cmd := range cmds {
		switch cmd {
		case "open":
			n, d := c.open()
			fmt.Printf("ready %d %d\n", n, d.Milliseconds())
		case "storm":
			d, failed := c.storm()
			fmt.Printf("storm %d %d\n", d.Milliseconds(), failed)
		default:
			fmt.Fprintf(os.Stderr, "scale client: unknown command %q\n", cmd)
			return 2
		}
	}
	return 0
}

func newScaleClient() (*scaleClient, error) {
	n, err := strconv.Atoi(os.Getenv(scaleCountEnv))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("%s=%q: want a count ≥ 1", scaleCountEnv, os.Getenv(scaleCountEnv))
	}
	openers, err := strconv.Atoi(os.Getenv(scaleOpenersEnv))
	if err != nil || openers < 1 {
		return nil, fmt.Errorf("%s=%q: want a count ≥ 1", scaleOpenersEnv, os.Getenv(scaleOpenersEnv))
	}
	src := net.ParseIP(os.Getenv(scaleSourceEnv))
	if src == nil {
		return nil, fmt.Errorf("%s=%q: want an IP address", scaleSourceEnv, os.Getenv(scaleSourceEnv))
	}
	// Long timeouts: in a storm thousands of SYNs arrive at once, and one
	// the listen queue dropped is retried by the kernel a second or more
	// later. That is part of what the storm measures, not a failure.
	nd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 60 * time.Second}
	return &scaleClient{
		url: os.Getenv(scaleURLEnv), tok: os.Getenv(scaleTokenEnv), openers: openers,
		sessions: make([]*idleSession, n),
		dialer: &websocket.Dialer{ReadBufferSize: 256, WriteBufferSize: 256, HandshakeTimeout: 60 * time.Second,
			NetDialContext: nd.DialContext},
	}, nil
}

// hello dials and says hello (resuming sid when it is set) and returns
// the socket and the session frame.
func (c *scaleClient) hello(sid string, lastSeq uint64) (*websocket.Conn, scaleSessionFrame, error) {
	var f scaleSessionFrame
	ws, resp, err := c.dialer.Dial(c.url, nil)
	if err != nil {
		return nil, f, fmt.Errorf("dial: %w", err)
	}
	resp.Body.Close()
	h := map[string]any{"type": "hello", "token": c.tok}
	if sid != "" {
		h["session_id"], h["last_seq"] = sid, lastSeq
	}
	if err := ws.WriteJSON(h); err != nil {
		ws.Close()
		return nil, f, fmt.Errorf("hello: %w", err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(60 * time.Second))
	_, b, err := ws.ReadMessage()
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err == nil && f.Type != "session" {
		err = fmt.Errorf("want a session frame, got %.300s", b)
	}
	if err != nil {
		ws.Close()
		return nil, f, fmt.Errorf("session frame: %w", err)
	}
	return ws, f, nil
}

// idle hands ws to a reader that discards what comes (the history_batch
// of a resume, pings) until the socket fails.
func (s *idleSession) idle(ws *websocket.Conn) {
	_ = ws.SetReadDeadline(time.Time{})
	s.ws, s.done = ws, make(chan struct{})
	go func() {
		defer close(s.done)
		for {
			if _, _, err := ws.NextReader(); err != nil {
				return
			}
		}
	}()
}

// open opens every session, c.openers at a time, each with one
// acknowledged send; it stops at the first failure (reported on stderr)
// and returns how many are open and how long it took.
func (c *scaleClient) open() (int, time.Duration) {
	start := time.Now()
	var next, opened atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range c.openers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= len(c.sessions) {
					return
				}
				s, err := c.openOne()
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						fmt.Fprintf(os.Stderr, "scale client: open session %d: %v\n", i, err)
					}
					return
				}
				c.sessions[i] = s
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(opened.Load()), time.Since(start)
}

func (c *scaleClient) openOne() (*idleSession, error) {
	ws, f, err := c.hello("", 0)
	if err != nil {
		return nil, err
	}
	last, err := fill(ws, 1) // the session's one exchange: ack, user entry, echo reply
	if err != nil {
		ws.Close()
		return nil, fmt.Errorf("send: %w", err)
	}
	s := &idleSession{id: f.SessionID, lastSeq: last}
	s.idle(ws)
	return s, nil
}

// storm drops every session's connection and resumes it, all at once,
// and returns the time until the last session frame and how many
// sessions did not come back resumed (each one reported on stderr).
func (c *scaleClient) storm() (time.Duration, int) {
	start := time.Now()
	var mu sync.Mutex
	var slowest time.Duration
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, s := range c.sessions {
		if s == nil { // never opened: the parent has failed already
			failed.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.ws.Close() // no close frame: a dropped connection
			<-s.done
			ws, f, err := c.hello(s.id, s.lastSeq)
			if err == nil && (!f.Resumed || f.Reason != "resumed" || f.SessionID != s.id) {
				ws.Close()
				err = fmt.Errorf("not resumed: resumed=%v reason=%q session=%q", f.Resumed, f.Reason, f.SessionID)
			}
			if err != nil {
				failed.Add(1)
				fmt.Fprintf(os.Stderr, "scale client: resume %s: %v\n", s.id, err)
				return
			}
			took := time.Since(start)
			mu.Lock()
			slowest = max(slowest, took)
			mu.Unlock()
			s.idle(ws)
		}()
	}
	wg.Wait()
	return slowest, int(failed.Load())
}

// scaleFleet is the parent's side: the child processes, started by
// startScaleFleet and stopped by close (registered as a cleanup).
type scaleFleet struct {
	children []*scaleChild
	closed   sync.Once
	killed   int // children that had to be killed at close
}

type scaleChild struct {
	src      string // its source address
	sessions int
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	lines    chan string // its stdout, line by line; closed at EOF, when its reader returns
	stderr   *headBuffer
}

// startScaleFleet starts enough children to hold sessions idle sessions
// of url, at most perChild each, each child with a user of its own.
func startScaleFleet(tb testing.TB, url string, sessions, perChild int) (*scaleFleet, error) {
	if err := raiseSoftNoFile(); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("scale: test binary: %w", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_SCALE") {
			env = append(env, kv)
		}
	}
	k := (sessions + perChild - 1) / perChild
	f := &scaleFleet{}
	tb.Cleanup(func() { f.close() })
	for i := range k {
		n := sessions / k
		if i < sessions%k {
			n++
		}
		ch := &scaleChild{src: fmt.Sprintf("127.0.0.%d", 2+i), sessions: n, lines: make(chan string, 16),
			stderr: &headBuffer{max: 16 << 10}}
		ch.cmd = exec.Command(exe)
		ch.cmd.Env = append(env, scaleClientEnv+"=1", scaleURLEnv+"="+url,
			scaleTokenEnv+"="+tokenFor(tb, fmt.Sprintf("scale-%d", i)),
			scaleCountEnv+"="+strconv.Itoa(n), scaleSourceEnv+"="+ch.src, scaleOpenersEnv+"="+strconv.Itoa(scaleOpeners))
		ch.cmd.Stderr = ch.stderr
		if ch.stdin, err = ch.cmd.StdinPipe(); err != nil {
			return nil, fmt.Errorf("scale: child stdin: %w", err)
		}
		stdout, err := ch.cmd.StdoutPipe()
		if err != nil {
			return nil, fmt.Errorf("scale: child stdout: %w", err)
		}
		if err := ch.cmd.Start(); err != nil {
			return nil, fmt.Errorf("scale: start child: %w", err)
		}
		f.children = append(f.children, ch)
		go func() {
			defer close(ch.lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				ch.lines <- sc.Text()
			}
		}()
	}
	return f, nil
}

// command sends cmd to every child, as close together as the pipes
// allow, and collects each one's answer, which must start with want
// followed by two numbers.
func (f *scaleFleet) command(cmd, want string, timeout time.Duration) ([][2]int64, error) {
	for _, ch := range f.children {
		if _, err := io.WriteString(ch.stdin, cmd+"\n"); err != nil {
			return nil, fmt.Errorf("scale: child %s: write %q: %w", ch.src, cmd, err)
		}
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	out := make([][2]int64, len(f.children))
	for i, ch := range f.children {
		var line string
		var ok bool
		select {
		case line, ok = <-ch.lines:
		case <-deadline.C:
			return nil, fmt.Errorf("scale: child %s: no answer to %q within %v\n%s", ch.src, cmd, timeout, ch.stderr)
		}
		var a, b int64
		if n, err := fmt.Sscanf(line, want+" %d %d", &a, &b); !ok || err != nil || n != 2 {
			return nil, fmt.Errorf("scale: child %s: answered %q to %q (exited: %v)\n%s", ch.src, line, cmd, !ok, ch.stderr)
		}
		out[i] = [2]int64{a, b}
	}
	return out, nil
}

// open has every child open its sessions and returns the wall time until
// the last one is ready; every child must have opened all of its own.
func (f *scaleFleet) open(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ready, err := f.command("open", "ready", timeout)
	if err != nil {
		return 0, err
	}
	wall := time.Since(start)
	for i, ch := range f.children {
		if int(ready[i][0]) != ch.sessions {
			return 0, fmt.Errorf("scale: child %s opened %d sessions of %d\n%s", ch.src, ready[i][0], ch.sessions, ch.stderr)
		}
	}
	return wall, nil
}

// storm has every child drop and resume all its sessions at once and
// returns the slowest child's time to its last session frame; a session
// that failed to resume, or came back not resumed, is an error.
func (f *scaleFleet) storm(timeout time.Duration) (time.Duration, error) {
	res, err := f.command("storm", "storm", timeout)
	if err != nil {
		return 0, err
	}
	var slowest time.Duration
	var errs []error
	for i, ch := range f.children {
		slowest = max(slowest, time.Duration(res[i][0])*time.Millisecond)
		if res[i][1] != 0 {
			errs = append(errs, fmt.Errorf("scale: child %s: %d of %d sessions not resumed\n%s", ch.src, res[i][1], ch.sessions, ch.stderr))
		}
	}
	return slowest, errors.Join(errs...)
}

// cpu is the CPU time (user and system) the children have used so far.
func (f *scaleFleet) cpu() (time.Duration, error) {
	var total float64
	for _, ch := range f.children {
		_, s, err := procStat(ch.cmd.Process.Pid)
		if err != nil {
			return 0, fmt.Errorf("scale: child %s: %w", ch.src, err)
		}
		total += s
	}
	return time.Duration(total * float64(time.Second)), nil
}

// close closes every child's stdin, which ends it, and kills the ones
// that have not exited 10 s later. It returns how many had to be killed.
func (f *scaleFleet) close() int {
	f.closed.Do(func() {
		for _, ch := range f.children {
			_ = ch.stdin.Close()
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, ch := range f.children {
			// Its stdout ends when it exits; answers the caller left
			// unread (it failed) are drained on the way.
			kill := time.After(time.Until(deadline))
			for open := true; open; {
				select {
				case _, open = <-ch.lines:
				case <-kill:
					_ = ch.cmd.Process.Kill()
					f.killed++
					kill = nil
				}
			}
			_ = ch.cmd.Wait()
		}
	})
	return f.killed
}

// raiseSoftNoFile raises the open-file limit's soft value to the hard
// one. Go does so for itself at start but gives a child the limit it
// started with, unless the limit was set explicitly, as here. Unlike
// raiseNoFile it leaves the hard limit alone (root could raise it): the
// benchmark is about the limit the machine has.
func raiseSoftNoFile() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("scale: getrlimit: %w", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("scale: setrlimit: %w", err)
	}
	return nil
}

// headBuffer keeps the first max bytes written to it: a child's first
// errors are the ones that explain it.
type headBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - h.buf.Len(); room > 0 {
		h.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.String()
}
