package node_test

import (
	"time"

	"testing"

	"github.com/tether-dev/tether/actor/actortest"
)

// A session hibernates on its owner while its clients stay attached
// through other nodes (their connections are the node link's), and the
// next frame from either wakes it there without them noticing: the send
// is acked with the next seq and the other client is shown it.
func TestHibernateAcrossNodes(t *testing.T) {
	c := newCluster(t, 3, opts{hibernate: 100 * time.Millisecond})
	tok := token(t, "alice")
	first, s := newSession(t, c.nodes[0], tok)
	sid := s.SessionID
	first.Drop()
	own := owner(t, sid, c.nodes...)
	via := notOwners(t, sid, c.nodes)
	la, lb := newLedger(t), newLedger(t)
	a := dial(t, via[0])
	if s := a.hello(tok, sid, 0); !s.Resumed {
		t.Fatalf("resume via %s: %s", via[0].id, s.Raw)
	} else {
		la.observe(s)
	}
	b := dial(t, via[1])
	if err := b.Write(map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": 0, "attach": "shared"}); err != nil {
		t.Fatal(err)
	}
	if s := b.until("session", lb.observe, func(f frame) bool { return f.Type == "session" }); !s.Resumed {
		t.Fatalf("shared resume via %s: %s", via[1].id, s.Raw)
	}
	b.until("its history_batch", lb.observe, func(f frame) bool { return f.Type == "history_batch" })
	asleep := func() bool { return own.Registry.Stats().Asleep == 1 }
	for round, cl := range []*wsc{a, b, a} {
		actortest.Eventually(t, "the session hibernates on its owner", asleep)
		l := []*ledger{la, lb, la}[round]
		id := []string{"m1", "m2", "m3"}[round]
		if err := cl.Write(sendFrame(id, "after a sleep")); err != nil {
			t.Fatal(err)
		}
		ack := cl.until("the ack", l.observe, func(f frame) bool { return f.Type == "ack" && f.ID == id })
		other, ol := b, lb
		if cl == b {
			other, ol = a, la
		}
		other.until("the other's send", ol.observe, func(f frame) bool {
			if f.Type == "session" || f.Type == "history_batch" {
				t.Fatalf("a client was told of the wake: %s", f.Raw)
			}
			return f.Type == "message" && f.Seq == ack.Seq
		})
		cl.until("the reply", l.observe, func(f frame) bool { return f.Type == "message" && f.Role == "agent" && f.Seq == ack.Seq+1 })
		other.until("the reply", ol.observe, func(f frame) bool { return f.Type == "message" && f.Role == "agent" && f.Seq == ack.Seq+1 })
	}
	if st := own.Registry.Stats(); st.Hibernations < 3 {
		t.Fatalf("owner's stats %+v: want 3 hibernations or more", st)
	}
	log := wholeLog(t, c.nodes[0], tok, sid)
	la.check(log)
	lb.check(log)
}
