package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

func TestComplete(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.chat("a", "bye soon")
	c.send(map[string]any{"type": "complete"})
	frames := c.expectClose(1000)
	if len(frames) != 1 || frames[0]["type"] != "completed" || frames[0]["session_id"] != sid {
		t.Fatalf("want exactly one completed frame before the close, got %v", frames)
	}
	if s := n.snapshot(t, tok, sid); s.Status != "completed" || s.LastSeq != 2 {
		t.Fatalf("snapshot after complete: %+v", s)
	}
	for range 2 {
		c2 := dial(t, n.URL)
		s := c2.hello(tok, sid, 2)
		if nsid := checkSession(t, s, false, "completed", 0, 300); nsid == sid {
			t.Fatal("a completed session was resumed")
		}
		c2.sendMsg("b", "new") // no history_batch
		if c2.ackOf("b") != 1 {
			t.Fatal("new session not empty")
		}
	}
	if s := n.snapshot(t, tok, sid); s.Status != "completed" || s.LastSeq != 2 {
		t.Fatalf("snapshot after resumes of a completed session: %+v", s)
	}
	// Another user learns nothing: not_found, not completed.
	m := dial(t, n.URL)
	checkSession(t, m.hello(nodetest.Token(t, "mallory"), sid, 0), false, "not_found", 0, 300)
}

func TestSuperseded(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	old := dial(t, n.URL)
	sid := checkSession(t, old.hello(tok, "", 0), false, "new", 0, 300)
	old.chat("a", "one")

	nw := dial(t, n.URL)
	s, b := nw.resume(tok, sid, 2)
	checkSession(t, s, true, "resumed", 2, 300)
	if len(batchSeqs(t, b)) != 0 {
		t.Fatal("unexpected replay")
	}
	old.expectClose(4001)
	if nw.chat("b", "two") != 3 {
		t.Fatal("the newer connection does not work")
	}
	// Once the old connection is gone on the server too, the session is
	// still active and the new connection still works.
	actortest.Eventually(t, "one connection left", func() bool {
		v, ok := n.metric(t, "tether_connections")
		return ok && v == 1
	})
	if st := n.snapshot(t, tok, sid).Status; st != "active" {
		t.Fatalf("status %s after the superseded connection closed, want active", st)
	}
	if nw.chat("c", "three") != 5 {
		t.Fatal("the newer connection stopped working")
	}
}

func TestContext(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.send(map[string]any{"type": "context", "set": map[string]any{"goal": "compare two laptops", "lang": "zh"}})
	f := c.readType("context")
	if !jsonEq(f["context"], map[string]any{"goal": "compare two laptops", "lang": "zh"}) {
		t.Fatalf("context answer %v", f)
	}
	c.send(map[string]any{"type": "context", "set": map[string]any{"lang": "en", "budget": 900}})
	want := map[string]any{"goal": "compare two laptops", "lang": "en", "budget": float64(900)}
	if f := c.readType("context"); !jsonEq(f["context"], want) {
		t.Fatalf("merged context %v, want %v", f["context"], want)
	}
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")

	c2 := dial(t, n.URL)
	s, _ := c2.resume(tok, sid, 0)
	if !jsonEq(s["context"], want) || s["sensitive"] != false {
		t.Fatalf("context after reconnect %v (sensitive %v), want %v", s["context"], s["sensitive"], want)
	}
	if snap := n.snapshot(t, tok, sid); !jsonEq(snap.Context, want) || snap.Sensitive {
		t.Fatalf("snapshot context %v sensitive %v", snap.Context, snap.Sensitive)
	}

	// sensitive:true marks the session; nothing clears the mark.
	c2.send(map[string]any{"type": "context", "set": map[string]any{"sensitive": true}})
	if f := c2.readType("context"); obj(t, f["context"])["sensitive"] != true || obj(t, f["context"])["goal"] != "compare two laptops" {
		t.Fatalf("context answer %v", f)
	}
	c2.send(map[string]any{"type": "context", "set": map[string]any{"sensitive": false}})
	c2.readType("context")
	if snap := n.snapshot(t, tok, sid); !snap.Sensitive {
		t.Fatal("setting sensitive:false cleared the mark")
	}
	c2.closeNow()
	before := n.waitStatus(t, tok, sid, "interrupted")

	// A token without auth_time, or with one that is too old: 4003, the
	// session untouched.
	for name, spec := range map[string]gateway.TokenSpec{
		"no auth_time":    {User: "alice", AuthAge: -1},
		"auth_time 10min": {User: "alice", AuthAge: 10 * time.Minute},
	} {
		c := dial(t, n.URL)
		c.send(map[string]any{"type": "hello", "token": nodetest.Issue(t, spec), "session_id": sid, "last_seq": 0})
		frames := c.expectClose(4003)
		if len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "reauth_required" {
			t.Fatalf("%s: frames before 4003: %v", name, frames)
		}
		after := n.snapshot(t, tok, sid)
		if after.Status != "interrupted" || after.LastSeq != before.LastSeq || after.LastActiveAt != before.LastActiveAt || !after.Sensitive {
			t.Fatalf("%s: session changed: before %+v after %+v", name, before, after)
		}
	}
	// A fresh login resumes it.
	c3 := dial(t, n.URL)
	s, _ = c3.resume(nodetest.Issue(t, gateway.TokenSpec{User: "alice", AuthAge: 0}), sid, 0)
	if s["sensitive"] != true || obj(t, s["context"])["goal"] != "compare two laptops" {
		t.Fatalf("resume of the sensitive session: %v", s)
	}
	// A context frame without a set object is a bad_request.
	c3.send(map[string]any{"type": "context"})
	if e := c3.readType("error"); e["code"] != "bad_request" {
		t.Fatalf("context without set: %v", e)
	}
}

func TestSensitiveTool(t *testing.T) {
	t.Parallel()
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 50 * time.Millisecond})
	n := startNode(t, nodetest.Options{Actor: actor.Config{Engine: demo}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.sendMsg("p", "please pay 5 EUR")
	c.ackOf("p")
	c.message(1, "user")
	st := c.message(2, "tool")
	md := obj(t, st["metadata"])
	if md["name"] != "payment" || md["status"] != "started" || str(t, md["call_id"]) == "" {
		t.Fatalf("tool started: %v", st)
	}
	done := c.message(3, "tool")
	dmd := obj(t, done["metadata"])
	if dmd["call_id"] != md["call_id"] || dmd["name"] != "payment" || dmd["status"] != "completed" || str(t, dmd["result"]) == "" {
		t.Fatalf("tool completed: %v", done)
	}
	if r := c.message(4, "agent"); !strings.HasPrefix(str(t, r["content"]), "Payment done") {
		t.Fatalf("agent reply %v", r)
	}
	if !n.snapshot(t, tok, sid).Sensitive {
		t.Fatal("the payment tool did not mark the session sensitive")
	}
	if demo.Runs("payment") != 1 {
		t.Fatalf("payment ran %d times", demo.Runs("payment"))
	}
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")
	c2 := dial(t, n.URL)
	c2.send(map[string]any{"type": "hello", "token": nodetest.Issue(t, gateway.TokenSpec{User: "alice", AuthAge: -1}), "session_id": sid, "last_seq": 4})
	c2.expectClose(4003)
	c3 := dial(t, n.URL)
	s, _ := c3.resume(tok, sid, 4)
	if s["sensitive"] != true {
		t.Fatalf("session frame of a session that ran payment: %v", s)
	}
}

func TestDisconnectMidTool(t *testing.T) {
	t.Parallel()
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 600 * time.Millisecond})
	n := startNode(t, nodetest.Options{Actor: actor.Config{Engine: demo}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.sendMsg("q", "best laptop")
	c.ackOf("q")
	c.message(1, "user")
	started := c.message(2, "tool")
	callID := obj(t, started["metadata"])["call_id"]
	c.closeNow()

	// While the tool runs the snapshot shows the pending call.
	if snap := n.snapshot(t, tok, sid); snap.LastSeq == 2 {
		if p := snap.PendingToolCall; p == nil || p.CallID != callID || p.Name != "search" || p.Status != "started" || p.StartedSeq != 2 {
			t.Fatalf("pending tool call during the run: %+v", p)
		}
	}
	// The turn goes on without the client.
	actortest.Eventually(t, "the agent reply to be logged", func() bool {
		s := n.snapshot(t, tok, sid)
		return len(s.Messages) > 0 && s.Messages[len(s.Messages)-1].Role == "agent"
	})
	c2 := dial(t, n.URL)
	s, b := c2.resume(tok, sid, 2)
	checkSession(t, s, true, "resumed", 4, 300)
	if s["pending_tool_call"] != nil {
		t.Fatalf("pending_tool_call after the turn: %v", s["pending_tool_call"])
	}
	if got := batchSeqs(t, b); !seqsEq(got, span(3, 4)) {
		t.Fatalf("replay %v, want 3..4", got)
	}
	msgs := b["messages"].([]any)
	tool, reply := obj(t, msgs[0]), obj(t, msgs[1])
	tmd := obj(t, tool["metadata"])
	if tool["role"] != "tool" || tmd["status"] != "completed" || tmd["call_id"] != callID || str(t, tmd["result"]) == "" {
		t.Fatalf("replayed tool entry %v", tool)
	}
	if reply["role"] != "agent" || !strings.Contains(str(t, reply["content"]), "best laptop") {
		t.Fatalf("replayed reply %v", reply)
	}
	if got := demo.Runs("search"); got != 1 {
		t.Fatalf("search ran %d times, want 1", got)
	}
}

func TestShutdownCloses1012(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.chat("a", "x")
	_ = n.Server.Close()
	c.expectClose(1012)
	// The session is interrupted (resumable), not lost.
	m, err := n.Log.Header(sid)
	if err != nil {
		t.Fatal(err)
	}
	actortest.Eventually(t, "interrupted after shutdown", func() bool {
		m, err = n.Log.Header(sid)
		return err == nil && m.Status == "interrupted"
	})
	if m.LastSeq != 2 {
		t.Fatalf("last_seq %d after shutdown", m.LastSeq)
	}
}

// TestUnknownFieldsIgnored: PROTOCOL.md says unknown fields are ignored.
// A field that belongs to another frame type is unknown to this one, so
// its value, whatever its JSON type, must not make the frame invalid.
func TestUnknownFieldsIgnored(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	t.Run("hello", func(t *testing.T) {
		c := dial(t, n.URL)
		c.send(map[string]any{"type": "hello", "token": tok, "client": map[string]any{"v": 1}, "id": 7, "content": false, "limit": "none"})
		if f := c.read(); f["type"] != "session" {
			t.Errorf("hello with unknown fields (id:7, content:false, limit:\"none\") answered %v", f)
		}
	})
	c := dial(t, n.URL)
	checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	t.Run("send", func(t *testing.T) {
		c.send(map[string]any{"type": "send", "id": "u1", "content": "x", "x-trace": "abc", "limit": "many", "stream": true, "set": []int{1}, "last_seq": "x"})
		if f := c.read(); f["type"] != "ack" {
			t.Errorf("send with fields of other frame types answered %v", f)
			return
		}
		c.message(1, "user")
		c.message(2, "agent")
	})
	t.Run("history", func(t *testing.T) {
		c.send(map[string]any{"type": "history", "before_seq": 3, "limit": 1, "content": 5, "id": []int{}})
		if f := c.read(); f["type"] != "history_batch" {
			t.Errorf("history with fields of other frame types answered %v", f)
		}
	})
	t.Run("context", func(t *testing.T) {
		c.send(map[string]any{"type": "context", "set": map[string]any{"a": 1}, "token": 1, "metadata": "m"})
		if f := c.read(); f["type"] != "context" {
			t.Errorf("context with fields of other frame types answered %v", f)
		}
	})
	t.Run("plain unknown fields", func(t *testing.T) {
		c.send(map[string]any{"type": "send", "id": "u2", "content": "y", "x-trace": map[string]any{"deep": []any{1, "a", nil}}, "ts": 1.5})
		if f := c.read(); f["type"] != "ack" {
			t.Fatalf("send with an unknown field answered %v", f)
		}
	})
}
