package main

// Process-level harness: the real tether binary, started, killed and
// restarted on the same data directory, spoken to over raw WebSockets.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/gateway/wstest"
)

// testSecret is the --jwt-secret every test node runs with.
const testSecret = "crash-test-secret"

// tetherBin is the binary TestMain builds once.
var tetherBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tether-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdtemp:", err)
		os.Exit(1)
	}
	tetherBin = filepath.Join(dir, "tether")
	build := exec.Command("go", "build", "-o", tetherBin, "github.com/tether-dev/tether/cmd/tether")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tether:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// childEnv is the environment without any TETHER_* variable, so a
// developer's shell cannot change what a test runs.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") {
			env = append(env, kv)
		}
	}
	return env
}

// proc is one running `tether serve`.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	data string
	addr string // host:port it listens on

	opts procOpts // how it was started (restart starts it alike)

	mu     sync.Mutex
	stderr bytes.Buffer
	change chan struct{} // closed and replaced on each new stderr line

	exited  chan struct{} // closed once Wait returned
	waitErr error
}

// listenRE finds the listening line in either log format (text, json).
var (
	listenRE  = regexp.MustCompile(`msg=listening addr=(\S+)|"msg":"listening","addr":"([^"]+)"`)
	servingRE = regexp.MustCompile(`msg=serving addr=(\S+)|"msg":"serving","addr":"([^"]+)"`)
)

// startServe starts `tether serve` on data with extra flags and waits for
// its listening line.
func startServe(t *testing.T, data string, extra ...string) *proc {
	t.Helper()
	return startProc(t, data, append([]string{"--jwt-secret", testSecret}, extra...)...)
}

// startProc is startServe without the --jwt-secret flag.
func startProc(t *testing.T, data string, extra ...string) *proc {
	t.Helper()
	return startProcEnv(t, data, nil, extra...)
}

// startProcEnv is startProc with extra environment variables (KEY=value).
func startProcEnv(t *testing.T, data string, env []string, extra ...string) *proc {
	t.Helper()
	p := launch(t, data, env, extra...)
	p.awaitListening()
	return p
}

// procOpts says where a process runs and how the test reaches it; the
// zero value is a process on 127.0.0.1 reached directly.
type procOpts struct {
	env    []string
	listen string // --listen; default 127.0.0.1:0
	// command makes the exec.Cmd (default exec.Command), e.g. one that
	// runs inside a network namespace (bench/netns Lab.Command).
	command func(name string, args ...string) *exec.Cmd
	// netDial makes the test's connections to the process (default: a
	// plain dial), e.g. from inside its namespace (Lab.DialContext).
	netDial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// launch starts tether serve without waiting for it to listen.
func launch(t *testing.T, data string, env []string, extra ...string) *proc {
	t.Helper()
	return launchOpts(t, data, procOpts{env: env}, extra...)
}

// launchOpts is launch with the process placed by opts.
func launchOpts(t *testing.T, data string, opts procOpts, extra ...string) *proc {
	t.Helper()
	listen, command := opts.listen, opts.command
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	if command == nil {
		command = exec.Command
	}
	args := append([]string{"serve", "--listen", listen, "--data", data}, extra...)
	cmd := command(tetherBin, args...)
	cmd.Env = append(childEnv(), opts.env...)
	p := launchCmd(t, cmd, data)
	p.opts = opts
	return p
}

// launchCmd starts any command as a proc whose stderr is watched (the
// example agents run this way too); it is killed when the test ends.
func launchCmd(t *testing.T, cmd *exec.Cmd, data string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: cmd, data: data, change: make(chan struct{}), exited: make(chan struct{})}
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.killIfRunning)
	go func() {
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
		_, _ = io.Copy(io.Discard, pipe)
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p
}

// awaitListening waits for a launched process's listening line.
func (p *proc) awaitListening() {
	p.t.Helper()
	p.awaitLine(listenRE)
}

// awaitServing waits until a launched process serves its listener: a
// clustered node does so before it has caught up with its peers (a
// restarted one waits there for a quorum), and logs listening only then.
func (p *proc) awaitServing() {
	p.t.Helper()
	p.awaitLine(servingRE)
}

func (p *proc) awaitLine(re *regexp.Regexp) {
	p.t.Helper()
	line, err := p.waitLogRE(re, 20*time.Second)
	if err != nil {
		p.killIfRunning()
		p.t.Fatalf("tether %v: %v\nstderr:\n%s", p.cmd.Args[1:], err, p.Stderr())
	}
	m := re.FindStringSubmatch(line)
	p.addr = m[1] + m[2]
}

// Stderr is everything the process logged so far.
func (p *proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitLogRE waits for a stderr line matching re and returns it.
func (p *proc) waitLogRE(re *regexp.Regexp, timeout time.Duration) (string, error) {
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
			if l, ok := match(p.Stderr()); ok {
				return l, nil
			}
			return "", fmt.Errorf("process exited (%v) before logging a line matching %s", p.waitErr, re)
		case <-deadline:
			return "", fmt.Errorf("no line matching %s logged within %v", re, timeout)
		}
	}
}

// waitLog waits for a stderr line containing substr and returns it.
func (p *proc) waitLog(substr string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		text, ch := p.stderr.String(), p.change
		p.mu.Unlock()
		if l, ok := findLine(text, substr); ok {
			return l, nil
		}
		select {
		case <-ch:
		case <-p.exited:
			// One last look: the final lines may have come with the exit.
			if l, ok := findLine(p.Stderr(), substr); ok {
				return l, nil
			}
			return "", fmt.Errorf("process exited (%v) before logging %q", p.waitErr, substr)
		case <-deadline:
			return "", fmt.Errorf("no %q logged within %v", substr, timeout)
		}
	}
}

func findLine(text, substr string) (string, bool) {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			return l, true
		}
	}
	return "", false
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *proc) killIfRunning() {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// kill9 SIGKILLs the process and waits until it is gone.
func (p *proc) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Fatal("process still there 10s after SIGKILL")
	}
}

// term sends SIGTERM and returns the exit code and how long the exit took;
// it fails the test if the process is not gone within limit.
func (p *proc) term(limit time.Duration) (int, time.Duration) {
	p.t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(limit):
		p.killIfRunning()
		p.t.Fatalf("process did not exit within %v of SIGTERM\nstderr:\n%s", limit, p.Stderr())
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(start)
}

// restart starts a new process on the same data directory.
func (p *proc) restart(extra ...string) *proc {
	p.t.Helper()
	if p.running() {
		p.t.Fatal("restart: the old process is still running")
	}
	np := launchOpts(p.t, p.data, p.opts, append([]string{"--jwt-secret", testSecret}, extra...)...)
	np.awaitListening()
	return np
}

func (p *proc) wsURL() string   { return "ws://" + p.addr + "/v1/ws" }
func (p *proc) httpURL() string { return "http://" + p.addr }

// ws opens a client connection to the process.
func (p *proc) ws() *wsClient {
	p.t.Helper()
	c, err := wstest.DialVia(p.t, p.wsURL(), p.opts.netDial)
	if err != nil {
		p.t.Fatalf("dial %s: %v", p.wsURL(), err)
	}
	return &wsClient{Conn: c, t: p.t}
}

// client is the HTTP client that reaches the process.
func (p *proc) client() *http.Client {
	if p.opts.netDial == nil {
		return http.DefaultClient
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: p.opts.netDial, DisableKeepAlives: true}}
}

// metric reads one unlabelled sample from GET /metrics.
func (p *proc) metric(name string) (float64, error) {
	resp, err := p.client().Get(p.httpURL() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not exposed", name)
}

func (p *proc) mustMetric(name string) float64 {
	p.t.Helper()
	v, err := p.metric(name)
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

// snapshot is GET /v1/sessions/{id} with a Bearer token.
func (p *proc) snapshot(sid, token string) (int, wire.Snapshot) {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.httpURL()+"/v1/sessions/"+sid, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := p.client().Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out wire.Snapshot
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			p.t.Fatal(err)
		}
	}
	return resp.StatusCode, out
}

// waitStatus polls the snapshot until the session has status want.
func (p *proc) waitStatus(sid, token, want string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, s := p.snapshot(sid, token)
		if code == http.StatusOK && s.Status == want {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("session %s: status %q (HTTP %d), want %q within %v", sid, s.Status, code, want, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// poll checks cond every 10ms until it holds or timeout passes.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func token(t *testing.T, user string) string {
	t.Helper()
	tok, err := gateway.Issue([]byte(testSecret), gateway.TokenSpec{User: user}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
