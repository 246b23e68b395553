package gateway_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// holdBatch is the node's own backend, except that a resume's
// history_batch waits at the connection's door until release is closed;
// reached is closed when it gets there (the session frame is delivered
// by then).
type holdBatch struct {
	gateway.Backend
	reached, release chan struct{}
	once             *sync.Once
}

func (h holdBatch) Resume(ctx context.Context, req actor.ResumeRequest) (actor.Session, error) {
	req.Conn = heldConn{Conn: req.Conn, h: h}
	return h.Backend.Resume(ctx, req)
}

type heldConn struct {
	machine.Conn
	h holdBatch
}

func (c heldConn) Deliver(o machine.Out) {
	if _, ok := o.(*machine.BatchOut); ok {
		c.h.once.Do(func() { close(c.h.reached) })
		<-c.h.release
	}
	c.Conn.Deliver(o)
}

// TestResumeFramesLeaveTogether: the session frame of a resume is not
// written before the resume's history_batch is ready; both go out
// together, so a client's one wake-up takes both. The history_batch is
// held back here; the client must not see the session frame meanwhile.
func TestResumeFramesLeaveTogether(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.chat("a", "hello")
	c.ws.Close()

	h := holdBatch{Backend: gateway.Local(n.Registry), reached: make(chan struct{}), release: make(chan struct{}), once: new(sync.Once)}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(h.release) }) }
	url := serveBackend(t, h)
	t.Cleanup(release) // runs before the server's close (cleanups run last first)
	r := dial(t, url)
	r.send(map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": 0})
	select {
	case <-h.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the resume's history_batch never reached the connection")
	}
	// The session frame was delivered before the batch; nothing may be on
	// the wire yet.
	_ = r.ws.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, data, err := r.ws.ReadMessage(); err == nil {
		t.Fatalf("the client got %s before the history_batch was ready", data)
	}
	// gorilla does not read again after a timeout: a new connection takes
	// the session over once the first is released.
	release()
	r2 := dial(t, url)
	checkSession(t, r2.hello(tok, sid, 2), true, "resumed", 2, 300)
}
