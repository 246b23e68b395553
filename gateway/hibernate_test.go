package gateway_test

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// waitAsleep waits until the node has n hibernated sessions.
func (n *node) waitAsleep(t *testing.T, want float64) {
	t.Helper()
	actortest.Eventually(t, "sessions asleep", func() bool {
		v, ok := n.metric(t, "tether_sessions_asleep")
		return ok && v == want
	})
}

// A quiet session hibernates with its clients' sockets open, over real
// WebSockets: pings are answered while it sleeps, the next send wakes it
// and nothing tells the client so. A shared client that stayed attached
// while asleep gets what the other one's send made. A client that goes
// away while the session sleeps starts the reconnect window.
func TestHibernatedSessionOverWebSocket(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Actor: actor.Config{HibernateAfter: 50 * time.Millisecond}})
	tok := nodetest.Token(t, "alice")
	a := dial(t, n.URL)
	sid := checkSession(t, a.hello(tok, "", 0), false, "new", 0, 300)
	a.chat("m1", "hello")
	b := dial(t, n.URL)
	b.send(map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": 2, "attach": "shared"})
	b.readType("session")
	b.readType("history_batch")
	n.waitAsleep(t, 1)

	if seen := a.pingPong(); len(seen) != 0 {
		t.Fatalf("a ping to a sleeping session brought %v", seen)
	}
	n.waitAsleep(t, 1) // a ping does not wake it
	if seq := a.chat("m2", "again"); seq != 3 {
		t.Fatalf("the send that woke the session got seq %d", seq)
	}
	b.message(3, "user")
	b.message(4, "agent")
	if v, _ := n.metric(t, "tether_sessions_hibernated_total"); v < 1 {
		t.Fatalf("tether_sessions_hibernated_total = %v", v)
	}

	n.waitAsleep(t, 1)
	a.closeNow()
	b.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")
	c := dial(t, n.URL)
	s, batch := c.resume(tok, sid, 4)
	if num(t, s["last_seq"]) != 4 || len(batchSeqs(t, batch)) != 0 {
		t.Fatalf("resume after sleeping: %v %v", s, batch)
	}
}
