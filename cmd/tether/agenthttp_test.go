package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestServeAgentHTTPFlags(t *testing.T) {
	for _, v := range []string{"TETHER_AGENT_URL", "TETHER_AGENT_SECRET", "TETHER_AGENT_TIMEOUT"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	parse := func(args ...string) (serveConfig, error) {
		m := &Main{Stdout: &bytes.Buffer{}, Stderr: io.Discard}
		return m.parseServe(append([]string{"--jwt-secret", "s", "--agent", "http"}, args...))
	}
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), "--agent-url") {
		t.Fatalf("no url: %v", err)
	}
	if _, err := parse("--agent-url", "http://127.0.0.1:9000/agent"); err == nil || !strings.Contains(err.Error(), "--agent-secret") {
		t.Fatalf("no secret: %v", err)
	}
	if _, err := parse("--agent-url", "127.0.0.1:9000", "--agent-secret", "x"); err == nil || !strings.Contains(err.Error(), "http(s) URL") {
		t.Fatalf("bad url: %v", err)
	}
	t.Setenv("TETHER_AGENT_URL", "http://127.0.0.1:9000/agent")
	t.Setenv("TETHER_AGENT_SECRET", "from-env")
	t.Setenv("TETHER_AGENT_TIMEOUT", "7s")
	c, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if want := (agentFlags{url: "http://127.0.0.1:9000/agent", secret: "from-env", timeout: 7 * time.Second}); c.agentHTTP != want {
		t.Fatalf("flags %+v, want %+v", c.agentHTTP, want)
	}
	t.Setenv("TETHER_AGENT_TIMEOUT", "soon")
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), "TETHER_AGENT_TIMEOUT") {
		t.Fatalf("bad env value: %v", err)
	}
}

// agentNode starts tether serve --agent http in front of url.
func agentNode(t *testing.T, url string, extra ...string) (*proc, []string) {
	t.Helper()
	flags := append([]string{"--agent", "http", "--agent-url", url, "--stream-flush", "0"}, extra...)
	env := []string{"TETHER_AGENT_SECRET=" + agentTestSecret}
	return startProcEnv(t, t.TempDir(), env, append([]string{"--jwt-secret", testSecret}, flags...)...), flags
}

// restartAgentNode starts a node on p's data again, with the same flags.
func restartAgentNode(t *testing.T, p *proc, flags []string) *proc {
	t.Helper()
	return startProcEnv(t, p.data, []string{"TETHER_AGENT_SECRET=" + agentTestSecret}, append([]string{"--jwt-secret", testSecret}, flags...)...)
}

// turn sends content and returns the messages of its turn up to the one
// done accepts (the user entry first).
func turn(t *testing.T, c *wsClient, id, content string, done func(frame) bool) []frame {
	t.Helper()
	c.mustWrite(sendFrame(id, content))
	var user uint64
	var out []frame
	c.until(20*time.Second, "the end of the turn for "+id, failOnError(t), func(f frame) bool {
		if f.Type == "ack" && f.ID == id {
			user = f.Seq
		}
		if f.Type != "message" || user == 0 || (f.Seq != user && replyTo(f) != user) {
			return false
		}
		out = append(out, f)
		return f.Seq != user && done(f)
	})
	return out
}

func isReply(f frame) bool { return f.Role == "agent" || f.Role == "system" }

func isSystem(f frame) bool { return f.Role == "system" }

// A streamed reply arrives as deltas, then one message; a client that
// drops mid-reply and resumes with its stream mark gets the reply from
// the next part on.
func TestAgentHTTPStream(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t, "")
	p, _ := agentNode(t, a.url())
	tok := token(t, "alice")
	c := dial(t, p.wsURL())
	sid := c.hello(tok, "", 0).SessionID

	c.mustWrite(sendFrame("s-1", "stream please"))
	var deltas strings.Builder
	var seq uint64
	msgs := 0
	final := c.until(10*time.Second, "the streamed reply", failOnError(t), func(f frame) bool {
		switch {
		case f.Type == "delta":
			if msgs > 0 && f.Seq == seq {
				t.Errorf("delta after the reply's message: %s", f.Raw)
			}
			seq = f.Seq
			deltas.WriteString(f.Text)
		case f.Type == "message" && f.Role == "agent":
			msgs++
			return true
		}
		return false
	})
	if final.Seq != seq || final.Content != "one two three" || deltas.String() != "one two three" {
		t.Fatalf("reply %s after deltas %q (seq %d)", final.Raw, deltas.String(), seq)
	}

	c.mustWrite(sendFrame("s-2", "resume please"))
	var held strings.Builder
	first := c.until(10*time.Second, "two parts", failOnError(t), func(f frame) bool {
		if f.Type == "delta" {
			held.WriteString(f.Text)
			return f.Part >= 1
		}
		return false
	})
	c.Drop()
	c2 := dial(t, p.wsURL())
	c2.mustWrite(map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": first.Seq - 1,
		"stream": map[string]any{"seq": first.Seq, "part": 1}})
	if s := c2.expect("session", 10*time.Second); !s.Resumed {
		t.Fatalf("resume: %s", s.Raw)
	}
	a.releaseReply()
	var rest strings.Builder
	firstFrom := -1
	done := c2.until(10*time.Second, "the rest of the reply", failOnError(t), func(f frame) bool {
		if f.Type == "delta" && f.Seq == first.Seq {
			if firstFrom < 0 {
				// A delta without from holds the one part it names
				// (PROTOCOL.md); the rest may come in one delta or two.
				firstFrom = f.Part
				if f.From != nil {
					firstFrom = *f.From
				}
			}
			rest.WriteString(f.Text)
		}
		return f.Type == "message" && f.Seq == first.Seq
	})
	if held.String() != "part0 part1 " || firstFrom != 2 || rest.String() != "part2 part3" {
		t.Fatalf("held %q, then from part %d: %q", held.String(), firstFrom, rest.String())
	}
	if done.Content != "part0 part1 part2 part3" {
		t.Fatalf("final message %s", done.Raw)
	}
	a.mu.Lock()
	bad := a.badSigs
	a.mu.Unlock()
	if bad != 0 {
		t.Fatalf("%d requests with a bad signature", bad)
	}
}

// SIGKILL while the endpoint runs a tool: a call not declared idempotent
// is logged failed "interrupted" and never sent again; an idempotent one
// is sent again with the same Idempotency-Key and its result logged once.
func TestAgentHTTPToolCrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		word     string
		requests int
		status   string
		reply    string
	}{
		{"charge", 1, "failed", "charge: interrupted"},
		{"lookup", 2, "completed", "lookup: found 42"},
	} {
		t.Run(tc.word, func(t *testing.T) {
			t.Parallel()
			a := newTestAgent(t, "")
			p, flags := agentNode(t, a.url())
			tok := token(t, "alice")
			c := dial(t, p.wsURL())
			sid := c.hello(tok, "", 0).SessionID
			c.mustWrite(sendFrame("t-1", tc.word+" something"))
			ack := c.until(10*time.Second, "ack", failOnError(t), func(f frame) bool { return f.Type == "ack" })
			started := c.until(10*time.Second, "tool started", failOnError(t), func(f frame) bool {
				return f.Type == "message" && f.Role == "tool" && f.MD("status") == "started"
			})
			callID := started.MD("call_id")
			select {
			case id := <-a.toolBlocked:
				if id != callID {
					t.Fatalf("tool request for %s, started entry %s", id, callID)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no tool request reached the endpoint")
			}
			p.kill9()
			p2 := restartAgentNode(t, p, flags)
			l := turnAfterRestart(t, p2, tok, sid, ack.Seq)
			statuses, _, entries, reply := callEntries(t, l, callID, ack.Seq)
			if len(statuses) != 2 || statuses[0] != "started" || statuses[1] != tc.status {
				t.Fatalf("call %s logged as %v, want [started %s]", callID, statuses, tc.status)
			}
			if want := strings.TrimPrefix(tc.reply, tc.word+": "); entries[1].Content != want {
				t.Errorf("outcome %s, want %q", entries[1].Raw, want)
			}
			if got := l.bySeq[reply].Content; got != tc.reply {
				t.Errorf("reply %q, want %q", got, tc.reply)
			}
			if n := a.count(a.tools, callID); n != tc.requests {
				t.Errorf("endpoint saw %d tool requests for %s, want %d", n, callID, tc.requests)
			}
			if n := a.count(a.keys, sid+"/"+callID); n != tc.requests {
				t.Errorf("Idempotency-Key %s/%s sent %d times, want %d", sid, callID, n, tc.requests)
			}
		})
	}
}

// Every failure ends the turn as AGENT-PROTOCOL.md says, and the next
// message works; a hanging request holds up no other session.
func TestAgentHTTPFailures(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t, "")
	p, _ := agentNode(t, a.url(), "--agent-timeout", "3s")
	tok := token(t, "alice")
	c := dial(t, p.wsURL())
	sid := c.hello(tok, "", 0).SessionID
	n := 0
	ok := func() {
		t.Helper()
		n++
		id := "ok-" + string(rune('a'+n))
		if es := turn(t, c, id, "hello "+id, isReply); es[len(es)-1].Content != "echo: hello "+id {
			t.Fatalf("the next message after a failure: %s", es[len(es)-1].Raw)
		}
	}
	agentErr := func(id, content string, want ...string) []frame {
		t.Helper()
		es := turn(t, c, id, content, isSystem)
		last := es[len(es)-1]
		if !strings.HasPrefix(last.Content, "agent error: ") {
			t.Fatalf("%s ended with %s, want agent error", content, last.Raw)
		}
		for _, w := range want {
			if !strings.Contains(last.Content, w) {
				t.Errorf("%s: %q does not say %q", content, last.Content, w)
			}
		}
		ok()
		return es
	}

	// 500s (the first with Retry-After: 1), then success: one reply.
	start := time.Now()
	es := turn(t, c, "f-1", "flaky one", isReply)
	if last := es[len(es)-1]; last.Content != "recovered" || len(es) != 2 {
		t.Fatalf("flaky turn %v", es)
	}
	key := sid + "/" + strconv.FormatUint(es[0].Seq, 10) + "/0"
	if got := a.count(a.keys, key); got != 3 {
		t.Errorf("key %s sent %d times, want 3 (two 500s, then 200)", key, got)
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("retried within %v: Retry-After: 1 was not honoured", el)
	}
	ok()

	es = agentErr("b-1", "broken line", "bad line", "line 2")
	if es[1].Role != "agent" || es[1].Content != "ok " {
		t.Errorf("text before the broken line: %s", es[1].Raw)
	}
	agentErr("c-1", "cut mid-line", "ended before its final line")
	agentErr("e-1", "oops", "the agent gave up")

	// A request that hangs ends at the timeout; meanwhile another session
	// is answered at once.
	c.mustWrite(sendFrame("h-1", "slow one"))
	other := dial(t, p.wsURL())
	other.hello(token(t, "bob"), "", 0)
	t0 := time.Now()
	other.chat("o-1", "hi from bob")
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("another session's turn took %v while a request hung", el)
	}
	c.until(10*time.Second, "the timeout", failOnError(t), func(f frame) bool {
		if f.Type == "message" && f.Role == "system" {
			if !strings.Contains(f.Content, "agent error: ") || !strings.Contains(f.Content, "timeout") {
				t.Errorf("hung request ended with %s", f.Raw)
			}
			return true
		}
		return false
	})
	ok()

	// approval: true: the call waits for the user; denied, it is never
	// sent, and the next step request sees the denied entry.
	es = turn(t, c, "a-1", "approve it", func(f frame) bool { return f.MD("status") == "awaiting_approval" })
	if len(es) != 2 || es[1].MD("status") != "awaiting_approval" || es[1].MD("name") != "approve" {
		t.Fatalf("approval turn %v", es)
	}
	c.mustWrite(map[string]any{"type": "approve", "call_id": es[1].MD("call_id"), "approved": false})
	denied := c.until(10*time.Second, "the denial", failOnError(t), func(f frame) bool { return f.Type == "message" && f.Role == "tool" })
	reply := c.until(10*time.Second, "the reply after the denial", failOnError(t), func(f frame) bool { return f.Type == "message" && isReply(f) })
	if denied.MD("status") != "denied" || denied.MD("by") != "alice" || reply.Content != "approve: denied" {
		t.Fatalf("after the denial: %s / %s", denied.Raw, reply.Raw)
	}
	if n := a.count(a.tools, es[1].MD("call_id")); n != 0 {
		t.Fatalf("a call needing approval was sent %d tool requests", n)
	}
}

// An endpoint that is down: connection errors are retried until the
// timeout, the turn ends with an agent error, and once it is up the next
// message works.
func TestAgentHTTPDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p, _ := agentNode(t, "http://"+addr+"/agent", "--agent-timeout", "2s")
	c := dial(t, p.wsURL())
	c.hello(token(t, "alice"), "", 0)
	es := turn(t, c, "d-1", "anyone there", isReply)
	if last := es[len(es)-1]; last.Role != "system" || !strings.Contains(last.Content, "agent error: ") ||
		!strings.Contains(last.Content, "connection refused") {
		t.Fatalf("turn with the endpoint down ended with %s", last.Raw)
	}
	if _, ok := findLine(p.Stderr(), "agent request failed; retrying"); !ok {
		t.Errorf("no retry logged:\n%s", p.Stderr())
	}
	newTestAgent(t, addr)
	if es := turn(t, c, "d-2", "now then", isReply); es[len(es)-1].Content != "echo: now then" {
		t.Fatalf("after the endpoint came up: %s", es[len(es)-1].Raw)
	}
}

// cancel while the endpoint streams: Tether closes the step request (the
// endpoint sees it go), the text so far is the agent's entry marked
// cancelled, and the next message is answered.
func TestAgentHTTPCancel(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t, "")
	p, _ := agentNode(t, a.url())
	c := dial(t, p.wsURL())
	c.hello(token(t, "alice"), "", 0)
	c.mustWrite(sendFrame("h-1", "hold on"))
	c.until(10*time.Second, "the first part", failOnError(t), func(f frame) bool { return f.Type == "delta" })
	c.mustWrite(map[string]any{"type": "cancel"})
	m := c.until(10*time.Second, "the cancelled reply", failOnError(t), func(f frame) bool { return f.Type == "message" && f.Role == "agent" })
	if m.Content != "thinking " || m.Metadata["cancelled"] != true {
		t.Fatalf("cancelled reply %s", m.Raw)
	}
	select {
	case <-a.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint's request was not closed by the cancel")
	}
	if es := turn(t, c, "h-2", "hello again", isReply); es[len(es)-1].Content != "echo: hello again" {
		t.Fatalf("the next turn %v", es)
	}
}
