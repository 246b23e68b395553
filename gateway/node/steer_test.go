package node_test

import (
	"testing"
	"time"
)

// notOwners are the nodes that do not own sid.
func notOwners(t *testing.T, sid string, nodes []*tnode) []*tnode {
	t.Helper()
	own := owner(t, sid, nodes...)
	var via []*tnode
	for _, n := range nodes {
		if n != own {
			via = append(via, n)
		}
	}
	return via
}

// Two connections share one session through two nodes that do not own
// it: both see the same gap-free entries and deltas live; a send from
// either is acked to its sender and seen by both; a cancel sent through
// the second node stops the turn the first one started.
func TestSharedAndCancelAcrossNodes(t *testing.T) {
	e := &partsEngine{parts: make(chan string, 16)}
	c := newCluster(t, 3, opts{engine: e, flush: -1})
	tok := token(t, "alice")
	first, s0 := newSession(t, c.nodes[0], tok)
	sid := s0.SessionID
	first.Drop()
	via := notOwners(t, sid, c.nodes)
	// A ledger each: a and b are shown the same entries, side by side.
	la, lb := newLedger(t), newLedger(t)
	a := dial(t, via[0])
	s := a.hello(tok, sid, 0)
	la.observe(s)
	if !s.Resumed {
		t.Fatalf("resume via %s: %s", via[0].id, s.Raw)
	}
	b := dial(t, via[1])
	if err := b.Write(map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": 0, "attach": "shared"}); err != nil {
		t.Fatal(err)
	}
	if s := b.until("session", lb.observe, func(f frame) bool { return f.Type == "session" }); !s.Resumed {
		t.Fatalf("shared resume via %s: %s", via[1].id, s.Raw)
	}
	if err := a.Write(sendFrame("m1", "go")); err != nil {
		t.Fatal(err)
	}
	ack := a.until("ack", la.observe, func(f frame) bool { return f.Type == "ack" && f.ID == "m1" })
	b.until("a's send", lb.observe, func(f frame) bool {
		if f.Type == "ack" {
			t.Fatalf("b got a's ack: %s", f.Raw)
		}
		return f.Type == "message" && f.Seq == ack.Seq
	})
	e.parts <- "half "
	for i, cl := range []*wsc{a, b} {
		// Through the ledger: a is shown its own send after the ack,
		// before the delta.
		l := []*ledger{la, lb}[i]
		if d := cl.until("delta", l.observe, func(f frame) bool { return f.Type == "delta" }); d.Text != "half " || d.Seq != ack.Seq+1 {
			t.Fatalf("delta %s", d.Raw)
		}
	}
	if err := b.Write(map[string]any{"type": "cancel", "reply_to": ack.Seq}); err != nil {
		t.Fatal(err)
	}
	for i, cl := range []*wsc{a, b} {
		l := []*ledger{la, lb}[i]
		m := cl.until("the cancelled reply", l.observe, func(f frame) bool { return f.Type == "message" && f.Role == "agent" })
		if m.Content != "half " || m.Metadata["cancelled"] != true || m.Seq != ack.Seq+1 {
			t.Fatalf("cancelled reply %s", m.Raw)
		}
	}
	if err := b.Write(sendFrame("m2", "from b")); err != nil {
		t.Fatal(err)
	}
	ackB := b.until("b's ack", lb.observe, func(f frame) bool { return f.Type == "ack" && f.ID == "m2" })
	e.parts <- "done"
	e.parts <- ""
	for i, cl := range []*wsc{a, b} {
		l := []*ledger{la, lb}[i]
		m := cl.until("the reply to b", l.observe, func(f frame) bool {
			if f.Type == "ack" && cl == a {
				t.Fatalf("a got b's ack: %s", f.Raw)
			}
			return f.Type == "message" && f.Role == "agent" && f.Seq > ackB.Seq
		})
		if m.Content != "done" {
			t.Fatalf("reply %s", m.Raw)
		}
	}
	log := wholeLog(t, c.nodes[0], tok, sid)
	la.check(log)
	lb.check(log)
}

// A booking started through one node is approved through another, after
// the first client left: it runs once, on the owner.
func TestApproveAcrossNodes(t *testing.T) {
	c := newCluster(t, 3, opts{toolDelay: 30 * time.Millisecond})
	tok := token(t, "alice")
	first, s0 := newSession(t, c.nodes[0], tok)
	sid := s0.SessionID
	first.Drop()
	via := notOwners(t, sid, c.nodes)
	a := dial(t, via[0])
	a.hello(tok, sid, 0)
	if err := a.Write(sendFrame("m1", "book a room")); err != nil {
		t.Fatal(err)
	}
	waiting := a.until("the booking waiting", nil, func(f frame) bool { return f.Type == "message" && f.Role == "tool" })
	if waiting.MD("status") != "awaiting_approval" {
		t.Fatalf("waiting %s", waiting.Raw)
	}
	a.Drop()
	b := dial(t, via[1])
	if s := b.hello(tok, sid, waiting.Seq); s.Pending == nil || s.Pending["status"] != "awaiting_approval" {
		t.Fatalf("session via %s: %s", via[1].id, s.Raw)
	}
	if err := b.Write(map[string]any{"type": "approve", "call_id": waiting.MD("call_id"), "approved": true}); err != nil {
		t.Fatal(err)
	}
	reply := b.until("the reply", nil, func(f frame) bool { return f.Type == "message" && f.Role == "agent" })
	own := owner(t, sid, c.nodes...)
	if reply.Content[:7] != "Booked:" || own.demo.Runs("booking") != 1 {
		t.Fatalf("reply %s, runs on the owner %d", reply.Raw, own.demo.Runs("booking"))
	}
}
