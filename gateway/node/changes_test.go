package node_test

// Membership changes under load, end to end: a node leaves gracefully, a
// node joins, a node keeps a stale view, a partition heals. Each loses no
// acked entry and ends with one owner per session.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/gateway/node"
)

type load []*writer

func (ws load) waitAcks(more int) {
	for _, w := range ws {
		w.waitAcks(w.ackCount() + more)
	}
}

func (ws load) stop() {
	for _, w := range ws {
		w.stop()
	}
}

func spread(t testing.TB, k int, target *tnode, nodes, others []*tnode) load {
	t.Helper()
	var ws load
	direct, remote, bystanders := 0, 0, 0
	if !slices.Contains(nodes, target) {
		direct = k // no client can attach to target directly
	}
	for i := 0; direct < k || remote < k; i++ {
		if i == 100 {
			t.Fatalf("100 sessions and still not %d owned by %s with a direct client and %d through others", k, target.id, k)
		}
		via := nodes[i%len(nodes)]
		if via == target && direct >= k || via != target && remote >= k && bystanders >= 2*k {
			continue
		}
		w := startWriter(t, fmt.Sprintf("w%d", i), func(a int) *tnode {
			if a == 0 {
				return via
			}
			return others[(i+a)%len(others)]
		})
		switch {
		case !target.Cluster.Owns(w.sid) && bystanders < 2*k:
			bystanders++
		case !target.Cluster.Owns(w.sid):
			w.stop()
			continue
		case via == target:
			direct++
		default:
			remote++
		}
		ws = append(ws, w)
	}
	return ws
}

func ownedWriter(t testing.TB, name string, target *tnode, pick func(int) *tnode) *writer {
	t.Helper()
	for i := range 40 {
		w := startWriter(t, fmt.Sprintf("%s%d", name, i), pick)
		if target.Cluster.Owns(w.sid) {
			return w
		}
		w.stop()
	}
	t.Fatalf("no session owned by %s in 40 tries", target.id)
	return nil
}

func allSessions(t testing.TB, nodes ...*tnode) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, n := range nodes {
		for sid := range sessionsIn(t, n) {
			out[sid] = true
		}
	}
	return out
}

func TestGracefulLeaveUnderLoad(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, opts{})
	leaving, others := c.nodes[2], c.nodes[:2]
	ws := spread(t, 2, leaving, c.nodes, others)
	ws.waitAcks(5)
	before := allSessions(t, c.nodes...) // the writers' and a few idle ones
	moved := map[string]bool{}
	for _, w := range ws {
		if leaving.Cluster.Owns(w.sid) || w.via(0) == leaving.id {
			moved[w.name] = true
		}
	}

	c.stop(leaving)
	c.waitView(others...)
	ws.waitAcks(5)
	ws.stopSettled(t, c)

	for _, w := range ws {
		codes := w.closeCodes()
		if moved[w.name] && !slices.Contains(codes, 1012) {
			t.Errorf("%s (session owned by %s, attached via %s) got close codes %v, want a 1012", w.name,
				owner(t, w.sid, others...).id, w.via(0), codes)
		}
		for _, code := range codes {
			if code != 1012 && code != 1013 {
				t.Errorf("%s: close code %d", w.name, code)
			}
		}
	}
	after := allSessions(t, others...)
	for sid := range before {
		if !after[sid] {
			t.Errorf("session %s was left behind on %s", sid, leaving.id)
		}
	}
	for _, w := range ws {
		log := wholeLog(t, others[0], w.tok, w.sid)
		last := w.l.check(log)
		for _, n := range others {
			if h, ok := header(n, w.sid); !ok || h.LastSeq != last {
				t.Errorf("%s's copy of %s: %+v (found %v), want last seq %d", n.id, w.sid, h, ok, last)
			}
		}
	}
}

// Not parallel: with the package's other clusters beside it under make
// test's load, the joined node's view did not settle in time in two of
// six runs (once within 90 s); alone it takes 22 s.
func TestJoinUnderLoad(t *testing.T) {
	c := newCluster(t, 3, opts{})
	var ws load
	for i := range 12 {
		via := c.nodes[i%3]
		ws = append(ws, startWriter(t, fmt.Sprintf("w%d", i), func(a int) *tnode {
			live := c.live()
			if a == 0 {
				return via
			}
			return live[(i+a)%len(live)]
		}))
	}
	ws.waitAcks(5)
	ownerBefore := map[string]string{}
	for _, w := range ws {
		ownerBefore[w.sid] = owner(t, w.sid, c.nodes...).id
	}

	n4 := c.add()
	c.waitView(c.nodes...)
	ws.waitAcks(5)
	ws.stopSettled(t, c)

	movedTo4 := 0
	for _, w := range ws {
		log := wholeLog(t, c.nodes[0], w.tok, w.sid)
		last := w.l.check(log)
		now := owner(t, w.sid, c.nodes...)
		if a := active(w.sid, c.nodes...); len(a) > 1 || len(a) == 1 && a[0] != now.id {
			t.Errorf("session %s (owner %s) has actors on %v", w.sid, now.id, a)
		}
		if now.id != ownerBefore[w.sid] && now != n4 {
			t.Errorf("session %s moved from %s to %s, not to the new node", w.sid, ownerBefore[w.sid], now.id)
		}
		if now == n4 {
			movedTo4++
			if h, ok := header(n4, w.sid); !ok || h.LastSeq != last {
				t.Errorf("n4's copy of %s: %+v (found %v), want last seq %d", w.sid, h, ok, last)
			}
		}
	}
	t.Logf("%d of %d sessions moved to the new node; its pulls: %d", movedTo4, len(ws), n4.Cluster.Stats().Pulls)
}

func slowTiming() *cluster.Timing {
	tm := cluster.TestTiming()
	tm.ProbeInterval, tm.ProbeTimeout, tm.SuspicionMult = 30*time.Second, 5*time.Second, 10
	return &tm
}

func TestLeaveWithAReplicaDown(t *testing.T) {
	t.Parallel()
	c := &tcluster{t: t, o: opts{replicas: 2, forward: 3 * time.Second}, log: actortest.Logger(t)}
	t.Cleanup(c.closeAll)
	if _, err := c.start("n1", nil, func(cfg *node.Config) { cfg.Cluster.Timing = *slowTiming() }); err != nil {
		t.Fatal(err)
	}
	c.add()
	c.waitView(c.nodes...)
	n1, n2 := c.nodes[0], c.nodes[1]
	w := ownedWriter(t, "a", n1, func(int) *tnode { return n1 })
	w.l.expect("unavailable") // its send in flight at the leave fails (its replica is gone)
	w.waitAcks(3)             // and it goes on writing

	// n2 crashes: its link and gossip stop answering, nothing said.
	_ = n2.Server.Close()
	_ = n2.Cluster.Close()
	closed := make(chan error, 1)
	go func() { closed <- n1.Close() }()
	select {
	case <-closed:
	case <-time.After(waitFor):
		t.Fatalf("n1 still closing %v after its replica crashed", waitFor)
	}
	c.mu.Lock()
	n1.closed = true
	c.mu.Unlock()
}

// stopSettled stops the writers and waits until no session has a turn
// in flight, so that the logs no longer grow: the logs read back after
// must hold a reply to every user entry. The writers are drained, not
// just stopped, so that no send is still on its way to be stored once
// the headers say the sessions are idle.
func (ws load) stopSettled(t testing.TB, c *tcluster) {
	t.Helper()
	for _, w := range ws {
		w.drain()
	}
	deadline := time.After(waitFor)
	for _, w := range ws {
		select {
		case <-w.done:
		case <-deadline:
			t.Fatalf("%s (session %s): its last send not acked %v after the writers were drained", w.name, w.sid, waitFor)
		}
	}
	ws.stop() // they ended; marks them stopped for the cleanups
	for _, w := range ws {
		actortest.Eventually(t, "the last turn of "+w.sid, func() bool {
			h, ok := header(owner(t, w.sid, c.live()...), w.sid)
			return ok && !machine.HasWork(h)
		})
	}
}
