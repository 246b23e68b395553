package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pythonExample is the Python example endpoint, from this package's
// directory.
const pythonExample = "../cmd/tether/examples/agent-python/agent.py"

// A short --agent http run against the real Python example, started by
// the harness, behind one real node, with drops: it passes, and the
// figures are there — turns per second, the endpoint's own step latency
// measured directly, the same through Tether, and the difference.
func TestLocalRunHTTPAgent(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed, so the Python example endpoint cannot run: install it to run this test")
	}
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "report.json")
	var out, errOut bytes.Buffer
	b, err := New(Config{
		Local: 1, ServerBin: serverBin(t), DataDir: filepath.Join(dir, "nodes"),
		Agent: "http", AgentScript: pythonExample,
		Sessions: 6, Ramp: time.Second, Duration: 4 * time.Second, Rate: 2,
		DropEvery: 2 * time.Second, AwayMax: 300 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Drain: 20 * time.Second, JSONPath: jsonPath, Out: &out, Err: &errOut,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := b.Run(ctx)
	if cerr := b.Close(); cerr != nil {
		t.Errorf("close: %v", cerr)
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	t.Logf("summary:\n%s", out.String())
	if !rep.Passed {
		t.Fatalf("violations:\n%s\n%s", out.String(), errOut.String())
	}
	if b.agentProc == nil {
		t.Fatal("the harness did not start the endpoint")
	}
	select {
	case <-b.agentProc.exited:
	default:
		t.Error("the endpoint still runs after Close")
	}

	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	a := r.Agent
	if a == nil {
		t.Fatalf("no agent figures in the JSON report:\n%s", data)
	}
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s; agent %+v", what, *a)
		}
	}
	check("the verdict", r.Passed && r.Target.Agent == "http" && r.Counts.SessionsVerified+r.Counts.SessionsExpired == int(r.Counts.Sessions))
	check("the endpoint the harness started", a.Started && strings.HasPrefix(a.URL, "http://127.0.0.1:"))
	check("turns were counted", a.Turns > 0 && a.Turns <= r.Counts.Replies && a.TurnsPerS > 0 && a.TurnsPerS == float64(a.Turns)/r.LoadS)
	check("the endpoint was timed directly", a.Direct.Count > 0 && a.Direct.P50 > 0 && a.Direct.P50 <= a.Direct.P99 && a.DirectErrors == 0)
	check("and through Tether", a.ThroughTether.Count > 0 && a.ThroughTether.P50 > 0 && a.ThroughTether == r.Latency[HReply])
	check("the difference", a.AddedP50Ms == a.ThroughTether.P50-a.Direct.P50 && a.AddedP99Ms == a.ThroughTether.P99-a.Direct.P99)
	// The example streams its words 50 ms apart: a reply of five words
	// takes 200 ms or more, direct or not.
	check("plausible step times", a.Direct.P50 >= 200 && a.ThroughTether.P50 >= 200)
	check("in the latency table", r.Latency[HDirect] == a.Direct && strings.Contains(out.String(), "turns/s"))
}

// What --agent http cannot do says why, before any node is started.
func TestHTTPAgentSetupErrors(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/agent"
	_ = ln.Close()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no python", Config{Agent: "http", AgentScript: pythonExample, Python: "python3-not-installed-here"},
			"python3-not-installed-here, which is not installed"},
		{"no endpoint", Config{AgentURL: closed, AgentSecret: "s"}, "did not answer a signed step request"},
		{"no secret", Config{AgentURL: closed}, "--agent-url needs --agent-secret"},
		{"no url or script", Config{Agent: "http"}, "--agent-url (an endpoint you run) or --agent-script"},
		{"not local", Config{Agent: "http", AgentURL: closed, AgentSecret: "s", URLs: []string{"ws://127.0.0.1:1/v1/ws"}, DevTokens: true},
			"need --local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if len(cfg.URLs) == 0 {
				cfg.Local, cfg.ServerBin, cfg.DataDir = 1, "/nonexistent/tether", t.TempDir()
			}
			b, err := New(cfg)
			if err == nil {
				_, err = b.Run(context.Background())
				if cerr := b.Close(); cerr != nil {
					t.Errorf("close: %v", cerr)
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
