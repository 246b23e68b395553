package gateway_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// TestKeepalive: a peer that answers pings stays attached past PongWait; a
// peer that stops reading (so answers no ping) is dropped, and its session
// becomes interrupted.
func TestKeepalive(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{PingInterval: 40 * time.Millisecond, PongWait: 400 * time.Millisecond}})
	tok := nodetest.Token(t, "alice")

	live := dial(t, n.URL)
	sid := checkSession(t, live.hello(tok, "", 0), false, "new", 0, 300)
	var pings atomic.Int32
	live.ws.SetPingHandler(func(data string) error {
		pings.Add(1)
		return live.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	done := make(chan error, 1)
	go func() {
		for {
			if _, _, err := live.ws.ReadMessage(); err != nil {
				done <- err
				return
			}
		}
	}()
	// 20 pings span well over PongWait.
	actortest.Eventually(t, "20 pings", func() bool { return pings.Load() >= 20 })
	if st := n.snapshot(t, tok, sid).Status; st != "active" {
		t.Fatalf("a peer answering pings was dropped: status %s", st)
	}
	live.closeNow()
	<-done

	dead := dial(t, n.URL)
	sid2 := checkSession(t, dead.hello(tok, "", 0), false, "new", 0, 300)
	// No reads from here on: pings go unanswered.
	n.waitStatus(t, tok, sid2, "interrupted")
	c := dial(t, n.URL)
	c.resume(tok, sid2, 0)
}

// TestConcurrentClients: many clients at once on one node, each with its
// own gap-free session.
func TestConcurrentClients(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	t.Run("group", func(t *testing.T) {
		for i := range 20 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				tok := nodetest.Token(t, fmt.Sprintf("user-%d", i%5))
				c := dial(t, n.URL)
				sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
				for j := range 10 {
					if got := c.chat(fmt.Sprintf("%d-%d", i, j), fmt.Sprintf("client %d message %d", i, j)); got != uint64(2*j+1) {
						t.Fatalf("seq %d, want %d", got, 2*j+1)
					}
				}
				c.closeNow()
				n.waitStatus(t, tok, sid, "interrupted")
				r := dial(t, n.URL)
				_, b := r.resume(tok, sid, 0)
				if got := batchSeqs(t, b); !seqsEq(got, span(1, 20)) {
					t.Fatalf("replay %v", got)
				}
			})
		}
	})
}

// TestUserFromToken: the user is the token's sub, whatever the frame says.
func TestUserFromToken(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	alice := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	c.send(map[string]any{"type": "hello", "token": alice, "user": "mallory", "user_id": "mallory", "sub": "mallory"})
	sid := checkSession(t, c.readType("session"), false, "new", 0, 300)
	c.chat("a", "x")
	if s := n.snapshot(t, alice, sid); s.SessionID != sid {
		t.Fatal("alice cannot read her session")
	}
	if code := getJSON(t, n.HTTP+"/v1/sessions/"+sid, nodetest.Token(t, "mallory"), nil); code != 404 {
		t.Fatalf("mallory reads a session made with alice's token: %d", code)
	}
}

// TestReauthDoesNotSupersede: a stale token refused on a sensitive session
// leaves its current connection alone.
func TestReauthDoesNotSupersede(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.send(map[string]any{"type": "context", "set": map[string]any{"sensitive": true}})
	c.readType("context")
	stale := dial(t, n.URL)
	stale.send(map[string]any{"type": "hello", "token": nodetest.Issue(t, gateway.TokenSpec{User: "alice", AuthAge: -1}), "session_id": sid})
	stale.expectClose(4003)
	if c.chat("a", "still attached") != 1 {
		t.Fatal("want seq 1")
	}
	if st := n.snapshot(t, tok, sid).Status; st != "active" {
		t.Fatalf("status %s", st)
	}
}

// TestLastSeqBeyondLog: PROTOCOL.md does not say what a last_seq beyond
// the session's log gets; whatever it is, it must be a protocol answer
// and must leave the session as it was.
func TestLastSeqBeyondLog(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	sid := liveSession(t, n, tok)
	before := n.snapshot(t, tok, sid)
	c := dial(t, n.URL)
	c.send(map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": 99})
	f := c.read()
	switch f["type"] {
	case "session":
		t.Logf("last_seq beyond the log answered with %v", f)
		c.closeNow()
	case "error":
		if f["code"] == "internal" {
			t.Fatalf("internal error: %v", f)
		}
		if code, _ := c.closeCode(); code == 1011 {
			t.Fatal("closed with 1011")
		}
	default:
		t.Fatalf("unexpected %v", f)
	}
	after := n.waitStatus(t, tok, sid, "interrupted")
	if after.LastSeq != before.LastSeq {
		t.Fatalf("last_seq %d → %d", before.LastSeq, after.LastSeq)
	}
	intact(t, n, tok, sid, 2)
}

// TestCompleteDuringTool: completing while a tool runs logs the call as
// failed, so the log never shows a call without an outcome, and the tool's
// late result is not appended.
func TestCompleteDuringTool(t *testing.T) {
	t.Parallel()
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 300 * time.Millisecond})
	n := startNode(t, nodetest.Options{Actor: actor.Config{Engine: demo}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.sendMsg("q", "search something")
	c.ackOf("q")
	c.message(1, "user")
	c.message(2, "tool")
	c.send(map[string]any{"type": "complete"})
	frames := c.expectClose(1000)
	var completed int
	for _, f := range frames {
		if f["type"] == "completed" {
			completed++
		}
	}
	if completed != 1 || frames[len(frames)-1]["type"] != "completed" {
		t.Fatalf("frames before 1000: %v", frames)
	}
	s := n.snapshot(t, tok, sid)
	if s.Status != "completed" || s.PendingToolCall != nil {
		t.Fatalf("after complete: %+v", s)
	}
	outcome := ""
	for _, m := range s.Messages {
		if m.Role == "tool" && m.Seq > 2 {
			outcome, _ = m.Metadata["status"].(string)
			if outcome == "failed" && !strings.Contains(m.Content, "completed") {
				t.Errorf("failed call's result %q does not say why", m.Content)
			}
		}
	}
	if outcome != "failed" && outcome != "completed" { // completed: the tool beat the complete
		t.Fatalf("the call started at seq 2 has no outcome in the log: %+v", s.Messages)
	}
	if got := demo.Runs("search"); got != 1 {
		t.Fatalf("search ran %d times", got)
	}
}

// TestPassivatedResume: a session whose actor passivated is resumed from
// the log with everything: entries, context, send ids.
func TestPassivatedResume(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Actor: actor.Config{IdleTimeout: 30 * time.Millisecond}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.chat("a", "one")
	c.send(map[string]any{"type": "context", "set": map[string]any{"goal": "g"}})
	c.readType("context")
	c.closeNow()
	actortest.Eventually(t, "the actor to passivate", func() bool { return n.Registry.Stats().Active == 0 })
	if st := n.snapshot(t, tok, sid).Status; st != "interrupted" {
		t.Fatalf("passivated session status %s", st)
	}
	r := dial(t, n.URL)
	s, b := r.resume(tok, sid, 1)
	checkSession(t, s, true, "resumed", 2, 300)
	if !jsonEq(s["context"], map[string]any{"goal": "g"}) {
		t.Fatalf("context %v", s["context"])
	}
	if got := batchSeqs(t, b); !seqsEq(got, []uint64{2}) {
		t.Fatalf("replay %v", got)
	}
	r.sendMsg("a", "one")
	if r.ackOf("a") != 1 {
		t.Fatal("send id forgotten across passivation")
	}
	if r.chat("b", "two") != 3 {
		t.Fatal("want seq 3")
	}
}

// TestRestartResume: after a node restarts on the same data, a session
// that was connected when it stopped resumes, with its whole log.
func TestRestartResume(t *testing.T) {
	t.Parallel()
	n1 := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n1.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	for i := range 3 {
		c.chat(fmt.Sprint(i), "before restart")
	}
	// Read while the node stops, so the close handshake completes at once.
	closed := make(chan int, 1)
	go func() {
		for {
			if _, _, err := c.ws.ReadMessage(); err != nil {
				code := 0
				if ce, ok := err.(*websocket.CloseError); ok {
					code = ce.Code
				}
				closed <- code
				return
			}
		}
	}()
	_ = n1.Close() // what it closes the client with is the check
	if code := <-closed; code != 1012 {
		t.Fatalf("stopping node closed the client with %d, want 1012", code)
	}

	n2 := startNode(t, nodetest.Options{Dir: n1.Dir})
	if st := n2.snapshot(t, tok, sid).Status; st != "interrupted" {
		t.Fatalf("after restart the session is %s, want interrupted", st)
	}
	r := dial(t, n2.URL)
	s, b := r.resume(tok, sid, 0)
	checkSession(t, s, true, "resumed", 6, 300)
	if got := batchSeqs(t, b); !seqsEq(got, span(1, 6)) {
		t.Fatalf("replay after restart %v", got)
	}
	if r.chat("3", "after restart") != 7 {
		t.Fatal("want seq 7")
	}
}

// TestResumeMidTurn: a resume while a turn is running gets the logged part
// in the history_batch and the rest live, each entry exactly once, in
// order; the superseded connection gets 4001.
func TestResumeMidTurn(t *testing.T) {
	t.Parallel()
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 300 * time.Millisecond})
	n := startNode(t, nodetest.Options{Actor: actor.Config{Engine: demo}})
	tok := nodetest.Token(t, "alice")
	old := dial(t, n.URL)
	sid := checkSession(t, old.hello(tok, "", 0), false, "new", 0, 300)
	old.sendMsg("q", "phones")
	old.ackOf("q")
	old.message(1, "user")
	old.message(2, "tool")

	nw := dial(t, n.URL)
	s, b := nw.resume(tok, sid, 1)
	seqs := batchSeqs(t, b)
	if len(seqs) == 0 || seqs[0] != 2 {
		t.Fatalf("replay %v, want from seq 2", seqs)
	}
	if last := num(t, s["last_seq"]); last != seqs[len(seqs)-1] {
		t.Fatalf("session last_seq %d, replay ends at %d", last, seqs[len(seqs)-1])
	}
	if num(t, s["last_seq"]) == 2 {
		p := obj(t, s["pending_tool_call"])
		if p["name"] != "search" || p["status"] != "started" || num(t, p["started_seq"]) != 2 {
			t.Fatalf("pending_tool_call %v", p)
		}
	}
	old.expectClose(4001)
	next := seqs[len(seqs)-1] + 1
	for next <= 4 {
		m := nw.readType("message")
		if got := num(t, m["seq"]); got != next {
			t.Fatalf("live seq %d after replay up to %d", got, next-1)
		}
		next++
	}
	if demo.Runs("search") != 1 {
		t.Fatalf("search ran %d times", demo.Runs("search"))
	}
	nw.sendMsg("z", "next")
	if nw.ackOf("z") != 5 {
		t.Fatal("want seq 5")
	}
}
