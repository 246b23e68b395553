package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/gateway/wire"
)

// until reads frames until pred holds and returns that frame; every frame
// read on the way is in seen.
func (c *wsc) until(what string, pred func(map[string]any) bool) (m map[string]any, seen []map[string]any) {
	c.t.Helper()
	for range 1000 {
		m = c.read()
		if m["type"] == "error" && what != "error" {
			c.t.Fatalf("waiting for %s: error %v", what, m)
		}
		if pred(m) {
			return m, seen
		}
		seen = append(seen, m)
	}
	c.t.Fatalf("no %s in 1000 frames", what)
	return nil, nil
}

func isMsg(role string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["type"] == "message" && m["role"] == role }
}

func md(m map[string]any) map[string]any {
	v, _ := m["metadata"].(map[string]any)
	return v
}

// pingPong sends a ping and returns what came before its pong: what the
// server sent in answer to the frames before it.
func (c *wsc) pingPong() []map[string]any {
	c.t.Helper()
	c.send(map[string]any{"type": "ping", "id": "sync"})
	_, seen := c.until("pong", func(m map[string]any) bool { return m["type"] == "pong" && m["id"] == "sync" })
	return seen
}

func demoNode(t *testing.T, cfg engine.DemoConfig) *node {
	return startNode(t, nodetest.Options{Actor: actor.Config{Engine: engine.NewDemo(cfg)}})
}

// cancel mid-stream: the text so far is the turn's agent entry, marked
// cancelled; the next send is answered normally; a late cancel does
// nothing.
func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	e := newScript()
	n := streamNode(t, e, -1)
	c := dial(t, n.URL)
	c.hello(nodetest.Token(t, "alice"), "", 0)
	c.sendMsg("m1", "tell me a long story")
	user := c.ackOf("m1")
	c.message(user, "user")
	e.parts("Once ", "upon ")
	c.until("the second part", func(m map[string]any) bool { return m["type"] == "delta" && num(t, m["part"]) == 1 })
	c.send(map[string]any{"type": "cancel", "reply_to": user})
	m, _ := c.until("the cancelled reply", isMsg("agent"))
	if m["content"] != "Once upon " || md(m)["cancelled"] != true || num(t, md(m)["reply_to"]) != user {
		t.Fatalf("cancelled reply %v", m)
	}
	// A cancel for the turn that ended, and one with none running, do
	// nothing (no error, no entry).
	c.send(map[string]any{"type": "cancel", "reply_to": user})
	c.send(map[string]any{"type": "cancel"})
	if seen := c.pingPong(); len(seen) != 0 {
		t.Fatalf("a late cancel answered %v", seen)
	}
	c.sendMsg("m2", "again")
	next := c.ackOf("m2")
	c.message(next, "user")
	e.finish("The end.")
	if m := c.message(next+1, "agent"); m["content"] != "The end." || md(m)["cancelled"] != nil {
		t.Fatalf("the next reply %v", m)
	}
}

// cancel during the demo's search: the call is logged failed "cancelled",
// then the turn's system entry; a send with interrupt ends a streamed
// reply (kept, marked cancelled) and is answered.
func TestCancelToolAndInterrupt(t *testing.T) {
	t.Parallel()
	n := demoNode(t, engine.DemoConfig{SearchDelay: time.Minute, StreamDelay: 50 * time.Millisecond})
	c := dial(t, n.URL)
	c.hello(nodetest.Token(t, "alice"), "", 0)
	c.sendMsg("m1", "search tether")
	c.until("the search started", isMsg("tool"))
	c.send(map[string]any{"type": "cancel"})
	failed, _ := c.until("the search's outcome", isMsg("tool"))
	note, _ := c.until("the cancel note", isMsg("system"))
	if md(failed)["status"] != "failed" || failed["content"] != engine.ResultCancelled || md(note)["cancelled"] != true || note["content"] != "cancelled" {
		t.Fatalf("cancelled search: %v / %v", failed, note)
	}

	d := demoNode(t, engine.DemoConfig{SearchDelay: 30 * time.Millisecond, StreamDelay: 100 * time.Millisecond})
	c = dial(t, d.URL)
	c.hello(nodetest.Token(t, "alice"), "", 0)
	c.sendMsg("m1", "tell me about the sea")
	first := c.ackOf("m1")
	c.until("the reply streaming", func(m map[string]any) bool { return m["type"] == "delta" })
	c.send(map[string]any{"type": "send", "id": "m2", "content": "no, the mountains", "interrupt": true})
	partial, _ := c.until("the interrupted reply", isMsg("agent"))
	if md(partial)["cancelled"] != true || num(t, md(partial)["reply_to"]) != first || !strings.HasPrefix(`I searched for "tell me about the sea". Found 3 results for "tell me about the sea".`, partial["content"].(string)) {
		t.Fatalf("interrupted reply %v", partial)
	}
	second := uint64(0)
	reply, _ := c.until("the second reply", func(m map[string]any) bool {
		if m["type"] == "ack" && m["id"] == "m2" {
			second = num(t, m["seq"])
		}
		return m["type"] == "message" && m["role"] == "agent" && second != 0 && num(t, md(m)["reply_to"]) == second
	})
	if !strings.Contains(reply["content"].(string), "no, the mountains") || md(reply)["cancelled"] != nil {
		t.Fatalf("the interrupting send's reply %v", reply)
	}
}

// approve: the booking waits (session frame and snapshot show it), from a
// second device of the same user; bad approves are refused; the first
// decision stands; another user cannot reach the call at all.
func TestApproveBooking(t *testing.T) {
	t.Parallel()
	n := demoNode(t, engine.DemoConfig{SearchDelay: 30 * time.Millisecond})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := str(t, c.hello(tok, "", 0)["session_id"])
	c.sendMsg("m1", "book a table for two")
	waiting, _ := c.until("the booking waiting", isMsg("tool"))
	callID := str(t, md(waiting)["call_id"])
	if md(waiting)["status"] != "awaiting_approval" || md(waiting)["name"] != "booking" || md(waiting)["args"] == nil {
		t.Fatalf("waiting entry %v", waiting)
	}
	c.closeNow()
	snap := n.waitStatus(t, tok, sid, "interrupted")
	if p := snap.PendingToolCall; p == nil || p.Status != "awaiting_approval" || p.CallID != callID {
		t.Fatalf("snapshot pending %+v", p)
	}

	// Another user: the session is not theirs, and the call id means
	// nothing in their own session.
	b := dial(t, n.URL)
	if s := b.hello(nodetest.Token(t, "bob"), sid, 0); s["reason"] != "not_found" {
		t.Fatalf("bob's hello %v", s)
	}
	b.send(map[string]any{"type": "approve", "call_id": callID, "approved": true})
	if er := b.readType("error"); er["code"] != "bad_request" {
		t.Fatalf("bob's approve %v", er)
	}

	phone := dial(t, n.URL)
	s, _ := phone.resume(nodetest.Token(t, "alice"), sid, num(t, waiting["seq"]))
	if p := obj(t, s["pending_tool_call"]); p["status"] != "awaiting_approval" || p["call_id"] != callID {
		t.Fatalf("session pending %v", s["pending_tool_call"])
	}
	for _, bad := range []map[string]any{
		{"type": "approve", "call_id": "call-999", "approved": true},
		{"type": "approve", "call_id": callID},
		{"type": "approve", "approved": true},
	} {
		phone.send(bad)
		if er := phone.readType("error"); er["code"] != "bad_request" {
			t.Fatalf("%v answered %v", bad, er)
		}
	}
	phone.send(map[string]any{"type": "approve", "call_id": callID, "approved": true})
	approved := phone.message(num(t, waiting["seq"])+1, "tool")
	if md(approved)["status"] != "approved" || md(approved)["by"] != "alice" || md(approved)["call_id"] != callID {
		t.Fatalf("approved entry %v", approved)
	}
	phone.send(map[string]any{"type": "approve", "call_id": callID, "approved": false})
	var statuses []string
	reply, seen := phone.until("the booking's reply", isMsg("agent"))
	for _, m := range seen {
		if m["type"] == "message" && m["role"] == "tool" {
			statuses = append(statuses, md(m)["status"].(string))
		}
	}
	if strings.Join(statuses, ",") != "started,completed" || !strings.HasPrefix(reply["content"].(string), "Booked: ") {
		t.Fatalf("after approve: %v, reply %v", statuses, reply)
	}
	phone.send(map[string]any{"type": "approve", "call_id": callID, "approved": false})
	if seen := phone.pingPong(); len(seen) != 0 {
		t.Fatalf("a decision after the first answered %v", seen)
	}
}

// A denied booking never runs; the reply says so.
func TestDenyBooking(t *testing.T) {
	t.Parallel()
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 30 * time.Millisecond})
	n := startNode(t, nodetest.Options{Actor: actor.Config{Engine: demo}})
	c := dial(t, n.URL)
	c.hello(nodetest.Token(t, "alice"), "", 0)
	c.sendMsg("m1", "book a flight")
	waiting, _ := c.until("the booking waiting", isMsg("tool"))
	c.send(map[string]any{"type": "approve", "call_id": md(waiting)["call_id"], "approved": false})
	denied := c.message(num(t, waiting["seq"])+1, "tool")
	reply := c.message(num(t, waiting["seq"])+2, "agent")
	if md(denied)["status"] != "denied" || !strings.Contains(reply["content"].(string), "declined") || demo.Runs("booking") != 0 {
		t.Fatalf("denied: %v / %v (runs %d)", denied, reply, demo.Runs("booking"))
	}
}

// Shared attach: both connections see every entry live, an ack goes to
// its sender only; the ninth is refused (rate_limited, 1013); a plain
// hello still supersedes (4001); an unknown attach is a bad hello.
func TestSharedAttach(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	a := dial(t, n.URL)
	sid := str(t, a.hello(tok, "", 0)["session_id"])
	shared := func() *wsc {
		c := dial(t, n.URL)
		c.send(map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": 0, "attach": "shared"})
		return c
	}
	b := shared()
	if s := b.readType("session"); s["resumed"] != true {
		t.Fatalf("shared hello %v", s)
	}
	b.readType("history_batch")
	a.sendMsg("a1", "from a")
	seq := a.ackOf("a1")
	a.message(seq, "user")
	a.message(seq+1, "agent")
	b.message(seq, "user") // no ack: b did not send it
	b.message(seq+1, "agent")
	b.sendMsg("b1", "from b")
	if got := b.ackOf("b1"); got != seq+2 {
		t.Fatalf("b's ack %d", got)
	}
	b.message(seq+2, "user")
	b.message(seq+3, "agent")
	a.message(seq+2, "user")
	a.message(seq+3, "agent")

	var more []*wsc
	for range 6 {
		c := shared()
		c.readType("session")
		c.readType("history_batch")
		more = append(more, c)
	}
	ninth := shared()
	if er := ninth.readType("error"); er["code"] != "rate_limited" {
		t.Fatalf("the ninth connection: %v", er)
	}
	ninth.expectClose(wire.CloseTryAgain)
	a.sendMsg("a2", "to all eight")
	last := a.ackOf("a2")
	for _, c := range append(more, b) {
		c.message(last, "user")
	}

	bad := dial(t, n.URL)
	bad.send(map[string]any{"type": "hello", "token": tok, "session_id": sid, "attach": "everything"})
	if er := bad.readType("error"); er["code"] != "bad_request" {
		t.Fatalf("unknown attach: %v", er)
	}
	bad.expectClose(wire.ClosePolicy)

	plain := dial(t, n.URL)
	plain.resume(tok, sid, last+1)
	for _, c := range append(more, a, b) {
		c.until("the close", func(m map[string]any) bool { return m["type"] == "message" && num(t, m["seq"]) == last+1 })
		c.expectClose(wire.CloseSuperseded)
	}
}
