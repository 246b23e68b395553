package node_test

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/cluster"
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

// The Raft leader dies while a session sleeps on another node. The send
// that wakes the session there meets no leader (an owner confirms the
// newest configuration with the leader before it claims) and waits for
// the next one to be elected: the client gets its ack, later, and is
// never told to reconnect. Before, the wake failed at once and the
// owner's clients were closed with 1012 (a make test run met this when a
// starved leader stepped down in TestHibernateAcrossNodes).
func TestWakeWaitsOutAnElection(t *testing.T) {
	tm := cluster.TestTiming()
	tm.RaftLeaderWait = waitFor // elections starve too under make test
	c := newCluster(t, 3, opts{hibernate: 100 * time.Millisecond, timing: &tm})
	var leader *tnode
	actortest.EventuallyWithin(t, settleFor, "a Raft leader", func() bool {
		for _, n := range c.nodes {
			if n.Cluster.Stats().Raft.IsLeader {
				leader = n
				return true
			}
		}
		return false
	})
	tok := token(t, "alice")
	// A session the leader neither owns nor holds a copy of (a claim
	// needs every replica, R copies means R, and a dead one stays in the
	// configuration until the leader's successor takes it out), and
	// whose owner stays its owner once it has (else the move would tell
	// the client to reconnect, as it should).
	after := placementWithout(c, leader)
	var own *tnode
	var sid string
	for range 50 {
		first, s := newSession(t, other(c, leader), tok)
		first.Drop()
		own, sid = owner(t, s.SessionID, c.nodes...), s.SessionID
		if _, held := header(leader, sid); !held && own != leader && after.Owner(sid) == own.id {
			break
		}
		own = nil
	}
	if own == nil {
		t.Fatal("every session of 50 had a copy on the leader")
	}
	l := newLedger(t)
	cl := dial(t, own)
	if s := cl.hello(tok, sid, 0); !s.Resumed {
		t.Fatalf("resume via %s: %s", own.id, s.Raw)
	} else {
		l.observe(s)
	}
	cl.until("its history_batch", l.observe, func(f frame) bool { return f.Type == "history_batch" })
	actortest.Eventually(t, "the session hibernates on its owner", func() bool { return own.Registry.Stats().Asleep == 1 })

	if err := leader.Cluster.Close(); err != nil { // as if its process were killed: no leave
		t.Fatal(err)
	}
	if err := cl.Write(sendFrame("m1", "while they elect")); err != nil {
		t.Fatal(err)
	}
	ack := cl.until("the ack", l.observe, func(f frame) bool {
		if f.Type == "session" || f.Type == "history_batch" {
			t.Fatalf("the client was told of the wake: %s", f.Raw)
		}
		return f.Type == "ack" && f.ID == "m1"
	})
	cl.until("the reply", l.observe, func(f frame) bool { return f.Type == "message" && f.Role == "agent" && f.Seq == ack.Seq+1 })
	if st := own.Registry.Stats(); st.Hibernations < 1 {
		t.Fatalf("owner's stats %+v: the session never slept", st)
	}
}
