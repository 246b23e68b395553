package node_test

import (
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
)

// outConn is a plain machine.Conn (not a cluster.FrameConn): what it is
// delivered, as actor values.
type outConn struct {
	mu   sync.Mutex
	outs []machine.Out
}

func (c *outConn) Deliver(o machine.Out)             { c.mu.Lock(); c.outs = append(c.outs, o); c.mu.Unlock() }
func (c *outConn) Close(machine.CloseReason, string) {}

func (c *outConn) batch() *machine.BatchOut {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.outs {
		if b, ok := o.(*machine.BatchOut); ok {
			return b
		}
	}
	return nil
}

// TestForwardedBatchEncodedByOwner: a history batch for a client attached
// through another node's gateway is encoded once, by the session's owner,
// and passed on as it is; a connection that cannot take encoded frames
// gets the batch as a value, the way every other frame crosses the link.
func TestForwardedBatchEncodedByOwner(t *testing.T) {
	c := newCluster(t, 3, opts{})
	tok := token(t, "alice")
	first, s := newSession(t, c.nodes[0], tok)
	sid := s.SessionID
	own := owner(t, sid, c.nodes...)
	var other *tnode
	for _, n := range c.nodes {
		if n != own {
			other = n
			break
		}
	}
	for i, id := range []string{"m1", "m2", "m3"} {
		if err := first.Write(sendFrame(id, "hello")); err != nil {
			t.Fatal(err)
		}
		first.until("reply "+id, nil, func(f frame) bool { return f.Type == "message" && f.Role == "agent" && f.Seq == uint64(2*i+2) })
	}
	first.Drop()

	// Through a gateway: the owner encodes the batch.
	before := own.Cluster.Stats().Frames
	a := dial(t, other)
	if s := a.hello(tok, sid, 2); !s.Resumed {
		t.Fatalf("resume via %s: %s", other.id, s.Raw)
	}
	b := a.until("history_batch", nil, func(f frame) bool { return f.Type == "history_batch" })
	if len(b.Messages) != 4 || b.FirstSeq != 3 || b.Messages[3].Seq != 6 || b.Messages[3].Content != "Agent reply: hello" {
		t.Fatalf("history_batch via %s: %s", other.id, b.Raw)
	}
	if got := own.Cluster.Stats().Frames; got != before+1 {
		t.Fatalf("the owner encoded %d batches for the forwarded resume, want 1", got-before)
	}
	a.Drop()

	// A plain connection: the batch arrives as a value.
	before = own.Cluster.Stats().Frames
	oc := &outConn{}
	sess, err := other.Cluster.Resume(t.Context(), actor.ResumeRequest{SessionID: sid, UserID: "alice", LastSeq: 4, AuthTime: time.Now(), Conn: oc})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Detach()
	deadline := time.Now().Add(waitFor)
	for oc.batch() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no history batch delivered to a plain connection")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	if bo := oc.batch(); len(bo.Messages) != 2 || bo.Messages[0].Seq != 5 {
		t.Fatalf("batch for a plain connection: %+v", bo)
	}
	if got := own.Cluster.Stats().Frames; got != before {
		t.Fatalf("the owner encoded a batch for a connection that cannot take it")
	}
}
