package main

// The example agents (examples/agent-python, examples/agent-node) as real
// processes: they refuse badly signed requests, and behind a real tether
// serve they stream, run tools, and a SIGKILL of the node during their
// non-idempotent tool never makes it run twice.

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine/httpagent"
)

type example struct{ name, bin, dir, script string }

var examples = []example{
	{"python", "python3", "examples/agent-python", "agent.py"},
	{"node", "node", "examples/agent-node", "agent.mjs"},
}

var exampleListenRE = regexp.MustCompile(`listening on (http://\S+)`)

// startExample runs ex with the test secret on a free port; it skips the
// test when the interpreter is not installed.
func startExample(t *testing.T, ex example, env ...string) (*proc, string) {
	t.Helper()
	bin, err := exec.LookPath(ex.bin)
	if err != nil {
		t.Skipf("%s is not installed, so the %s example agent cannot run: install it to run this test", ex.bin, ex.name)
	}
	cmd := exec.Command(bin, ex.script)
	cmd.Dir = ex.dir
	cmd.Env = append(childEnv(), append([]string{"AGENT_SECRET=" + agentTestSecret, "AGENT_PORT=0"}, env...)...)
	p := launchCmd(t, cmd, "")
	line, err := p.WaitLog(exampleListenRE, 20*time.Second)
	if err != nil {
		t.Fatalf("%s agent: %v\nstderr:\n%s", ex.name, err, p.Stderr())
	}
	return p, exampleListenRE.FindStringSubmatch(line)[1]
}

func TestExampleSignatures(t *testing.T) {
	t.Parallel()
	body := []byte(`{"kind":"step","session_id":"s","user_id":"alice","user":{"seq":1,"role":"user","content":"hello","timestamp":1,"metadata":{}},` +
		`"steps":[],"step":0,"history":[],"summary":null,"context":{},"agent_context":{}}`)
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			p, url := startExample(t, ex, "AGENT_STREAM_DELAY=0")
			post := func(sig string) (int, string) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "s/1/0")
				if sig != "" {
					req.Header.Set("Tether-Signature", sig)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			now := time.Now()
			code, out := post(httpagent.Sign([]byte(agentTestSecret), body, now))
			if code != http.StatusOK || !strings.HasSuffix(out, "{\"type\": \"reply\"}\n") && !strings.HasSuffix(out, "{\"type\":\"reply\"}\n") {
				t.Fatalf("a well signed step: %d %q", code, out)
			}
			sc := bufio.NewScanner(strings.NewReader(out))
			var joined strings.Builder
			for sc.Scan() {
				if l := sc.Text(); strings.Contains(l, `"text"`) {
					joined.WriteString(l)
				}
			}
			if !strings.Contains(joined.String(), "hello") {
				t.Errorf("no text parts in %q", out)
			}
			for what, sig := range map[string]string{
				"wrong secret":      httpagent.Sign([]byte("not-the-secret"), body, now),
				"stale timestamp":   httpagent.Sign([]byte(agentTestSecret), body, now.Add(-6*time.Minute)),
				"future timestamp":  httpagent.Sign([]byte(agentTestSecret), body, now.Add(6*time.Minute)),
				"no signature":      "",
				"malformed":         "v1=abc",
				"other body's sign": httpagent.Sign([]byte(agentTestSecret), []byte("{}"), now),
			} {
				if code, out := post(sig); code != http.StatusUnauthorized {
					t.Errorf("%s: %d %q, want 401", what, code, out)
				}
			}
			if _, err := p.waitLog("stale timestamp", 5*time.Second); err != nil {
				t.Errorf("the refusal of a stale timestamp is not logged: %v", err)
			}
		})
	}
}

func TestExampleBehindTether(t *testing.T) {
	t.Parallel()
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			agent, url := startExample(t, ex, "AGENT_TOOL_DELAY=60", "AGENT_STREAM_DELAY=0.02")
			p, flags := agentNode(t, url)
			tok := token(t, "alice")
			c := dial(t, p.wsURL())
			sid := c.hello(tok, "", 0).SessionID

			c.mustWrite(sendFrame("e-1", "hello there"))
			deltas := 0
			reply := c.until(10*time.Second, "the streamed reply", failOnError(t), func(f frame) bool {
				if f.Type == "delta" {
					deltas++
				}
				return f.Type == "message" && f.Role == "agent"
			})
			if reply.Content != "You said: hello there" || deltas < 2 {
				t.Fatalf("reply %s after %d deltas", reply.Raw, deltas)
			}

			es := turn(t, c, "e-2", "what is tether?", func(f frame) bool { return f.Role == "agent" })
			if len(es) != 4 || es[1].MD("name") != "lookup" || es[2].MD("status") != "completed" ||
				!strings.Contains(es[3].Content, "dropped connections") {
				t.Fatalf("lookup turn %v", es)
			}

			c.mustWrite(sendFrame("e-3", "order a book"))
			ack := c.until(10*time.Second, "ack", failOnError(t), func(f frame) bool { return f.Type == "ack" && f.ID == "e-3" })
			started := c.until(10*time.Second, "the order started", failOnError(t), func(f frame) bool {
				return f.Type == "message" && f.Role == "tool" && f.MD("status") == "started"
			})
			callID := started.MD("call_id")
			toolLine := "tool place_order call_id=" + callID + " "
			if _, err := agent.waitLog(toolLine, 10*time.Second); err != nil {
				t.Fatalf("the agent never got the tool request: %v\n%s", err, agent.Stderr())
			}
			p.kill9()
			p2 := restartAgentNode(t, p, flags)
			// The text before the call is an agent entry too: wait for the
			// one after the call's outcome.
			c2 := dial(t, p2.wsURL())
			c2.hello(tok, sid, 0)
			l := newEntryLog(t)
			final := c2.until(20*time.Second, "the reply after the order", l.observe, func(f frame) bool {
				return f.Type == "message" && f.Role == "agent" && f.Seq > started.Seq
			})
			var statuses []string
			for s := started.Seq; s < final.Seq; s++ {
				if e := l.bySeq[s]; e.MD("call_id") == callID {
					statuses = append(statuses, e.MD("status")+":"+e.Content)
				}
			}
			if len(statuses) != 2 || statuses[1] != "failed:interrupted" {
				t.Fatalf("order call logged as %v", statuses)
			}
			if !strings.Contains(final.Content, "did not finish (interrupted)") || replyTo(final) != ack.Seq {
				t.Errorf("reply after the interrupted order: %s", final.Raw)
			}
			if n := strings.Count(agent.Stderr(), toolLine); n != 1 {
				t.Errorf("the agent got %d tool requests for %s, want 1:\n%s", n, callID, agent.Stderr())
			}
			if es := turn(t, c2, "e-4", "thanks", isReply); es[len(es)-1].Content != "You said: thanks" {
				t.Fatalf("the next message: %s", es[len(es)-1].Raw)
			}
		})
	}
}
