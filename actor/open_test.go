package actor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/wal"
)

// orderConn notes whether the session frame reached it only after Open had
// already returned. Its Deliver holds the session frame back for a moment
// (longer than any scheduling delay) to make the order observable.
type orderConn struct {
	*recConn
	returned chan struct{} // closed by the test once Open returned
	late     atomic.Bool
}

func (c *orderConn) Deliver(o Out) {
	if _, ok := o.(*SessionOut); ok {
		hold := time.NewTimer(500 * time.Millisecond)
		select {
		case <-c.returned:
			c.late.Store(true)
		case <-hold.C:
		}
		hold.Stop()
	}
	c.recConn.Deliver(o)
}

// TestOpenDeliversSessionFrameBeforeReturning checks Open's documented
// contract: "The session frame (and on a resume the history_batch) are
// delivered to req.Conn before Open returns."
//
// It fails today: actor.handle answers the hello (ml.reply <- o) before it
// runs the effects that follow effOpened, i.e. before the SessionOut
// delivery and the replay.
func TestOpenDeliversSessionFrameBeforeReturning(t *testing.T) {
	r, _, _ := setup(t, Config{})
	first := newRecConn("first")
	h := openNew(t, r, "alice", first)
	chat(t, h, first, "m1", "hello")
	h.Detach()
	waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)

	for _, tc := range []struct {
		name string
		req  OpenRequest
	}{
		{"new", OpenRequest{UserID: "alice"}},
		{"resume", OpenRequest{UserID: "alice", SessionID: h.SessionID, LastSeq: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &orderConn{recConn: newRecConn(tc.name), returned: make(chan struct{})}
			req := tc.req
			req.Conn = c
			got, err := r.Open(t.Context(), req)
			close(c.returned)
			if err != nil {
				t.Fatal(err)
			}
			expect[*SessionOut](t, c.recConn)
			if c.late.Load() {
				t.Errorf("Open(%s) returned before the session frame was delivered", tc.name)
			}
			if got.Reason == ReasonResumed {
				expect[*BatchOut](t, c.recConn)
			}
			got.Detach()
		})
	}
}

// stallConn blocks in Deliver once armed, until released: it stands for an
// actor that is slow for a moment (a slow fsync, a busy node), so that a
// hello can wait in its mailbox.
type stallConn struct {
	*recConn
	armed   atomic.Bool
	stalled chan struct{} // closed when Deliver first blocks
	gate    chan struct{} // closed to let it go on
	once    sync.Once
	release func()
}

func newStallConn(name string) *stallConn {
	c := &stallConn{recConn: newRecConn(name), stalled: make(chan struct{}), gate: make(chan struct{})}
	var once sync.Once
	c.release = func() { once.Do(func() { close(c.gate) }) }
	return c
}

func (c *stallConn) Deliver(o Out) {
	if c.armed.Load() {
		c.once.Do(func() { close(c.stalled) })
		<-c.gate
	}
	c.recConn.Deliver(o)
}

// TestOpenCancelledDoesNotLeaveConnAttached: a hello whose context ends
// while its attach waits in the actor's mailbox gets ctx.Err() and no
// Handle. The attach still happens later. registry.attach assumes "the
// gateway closes the conn, whose detach then undoes it", but without a
// Handle the gateway has no way to detach, so the session stays `active`
// on a dead connection: its window never starts, it never expires, its
// actor never passivates, and the retention sweep never deletes it.
//
// It fails today; the session must end up interrupted.
func TestOpenCancelledDoesNotLeaveConnAttached(t *testing.T) {
	r, _, _ := setup(t, Config{})
	c1 := newStallConn("c1")
	t.Cleanup(c1.release) // runs before the registry closes
	h1 := open(t, r, OpenRequest{UserID: "alice", Conn: c1})
	expect[*SessionOut](t, c1.recConn)

	// Make the actor busy: it blocks delivering the ack of this send.
	c1.armed.Store(true)
	if err := h1.Send(t.Context(), "m1", "hello", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c1.stalled:
	case <-time.After(waitTimeout):
		t.Fatal("the actor never delivered the ack")
	}

	// A reconnect whose hello times out while queued behind that.
	r.mu.Lock()
	a := r.actors[h1.SessionID]
	r.mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	c2 := newRecConn("c2")
	errc := make(chan error, 1)
	go func() {
		_, err := r.Open(ctx, OpenRequest{SessionID: h1.SessionID, UserID: "alice", LastSeq: 0, Conn: c2})
		errc <- err
	}()
	eventually(t, "the hello is queued", func() bool { return len(a.mailbox) > 0 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Open: %v, want context.Canceled", err)
	}
	c2.Close(1006, "gone") // the gateway drops the connection; it has no Handle

	c1.release()
	// The attach is carried out after all ...
	expect[*SessionOut](t, c2)
	c1.waitClosed(t, CloseSuperseded)

	// ... and nothing can undo it.
	eventuallyWithin(t, time.Second, "the session is interrupted, not attached to a connection whose Open failed", func() bool {
		return snapshot(t, r, h1.SessionID, "alice").Meta.Status == wal.StatusInterrupted
	})
}
