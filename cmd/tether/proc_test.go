package main

// Process-level harness: the real tether binary, started, killed and
// restarted on the same data directory, spoken to over raw WebSockets.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/gateway/wstest"
)

// testSecret is the --jwt-secret every test node runs with: the kit's,
// so that nodetest's tokens are accepted.
const testSecret = nodetest.Secret

// TestMain removes the binary the kit built for the package's tests.
func TestMain(m *testing.M) {
	code := m.Run()
	nodetest.RemoveBinary()
	os.Exit(code)
}

// childEnv is the environment without any TETHER_* variable, so a
// developer's shell cannot change what a test runs.
var childEnv = nodetest.Environ

// proc is one running `tether serve` (or, by launchCmd, any command):
// the kit's process, with how it was started so that it restarts alike,
// and this package's extras (restart, kill -9, SIGTERM, serving).
type proc struct {
	*nodetest.Proc
	t    *testing.T
	cmd  *exec.Cmd // Proc.Cmd, by the name the tests use
	data string
	addr string // host:port it listens on

	opts procOpts // how it was started (restart starts it alike)
}

// servingRE finds the serving line in either log format (text, json).
var servingRE = regexp.MustCompile(`msg=serving addr=(\S+)|"msg":"serving","addr":"([^"]+)"`)

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
	np := nodetest.StartServe(t, nodetest.ServeOptions{
		Dir: data, Listen: opts.listen, Args: extra, Env: opts.env, Command: opts.command,
		// The callers wait: for listening, or for serving (a restarted
		// cluster node), or for all the nodes of a cluster after all
		// have started.
		NoWait: true,
	})
	return &proc{Proc: np, t: t, cmd: np.Cmd, data: data, opts: opts}
}

// launchCmd starts any command as a proc whose stderr is watched (the
// example agents run this way too); it is killed when the test ends.
func launchCmd(t *testing.T, cmd *exec.Cmd, data string) *proc {
	t.Helper()
	np := nodetest.StartCmd(t, cmd)
	return &proc{Proc: np, t: t, cmd: cmd, data: data}
}

// awaitListening waits for a launched process's listening line.
func (p *proc) awaitListening() {
	p.t.Helper()
	if err := p.WaitListening(20 * time.Second); err != nil {
		p.fail(err)
	}
	p.addr = p.Addr
}

// awaitServing waits until a launched process serves its listener: a
// clustered node does so before it has caught up with its peers (a
// restarted one waits there for a quorum), and logs listening only then.
func (p *proc) awaitServing() {
	p.t.Helper()
	line, err := p.WaitLog(servingRE, 20*time.Second)
	if err != nil {
		p.fail(err)
	}
	m := servingRE.FindStringSubmatch(line)
	p.addr = m[1] + m[2]
	p.Addr = p.addr
}

// fail kills the process and fails the test with its log.
func (p *proc) fail(err error) {
	p.t.Helper()
	p.Stop(0)
	p.t.Fatalf("tether %v: %v\nstderr:\n%s", p.cmd.Args[1:], err, p.Stderr())
}

// waitLog waits for a stderr line containing substr and returns it.
func (p *proc) waitLog(substr string, timeout time.Duration) (string, error) {
	return p.WaitLog(regexp.MustCompile(regexp.QuoteMeta(substr)), timeout)
}

// findLine is the first line of text containing substr.
func findLine(text, substr string) (string, bool) {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			return l, true
		}
	}
	return "", false
}

func (p *proc) running() bool { return p.Running() }

// kill9 SIGKILLs the process and waits until it is gone.
func (p *proc) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.Exited():
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
	case <-p.Exited():
	case <-time.After(limit):
		p.Stop(0)
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

// token issues user a token the test nodes accept.
var token = nodetest.Token
