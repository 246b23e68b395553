package actor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/tether-dev/tether/wal"
)

// flakyJournal is a real log whose next Append can be made to fail, the
// way a full or failing disk would.
type flakyJournal struct {
	*wal.Log
	failNext atomic.Bool
}

func (j *flakyJournal) Append(ctx context.Context, b wal.Batch) error {
	if j.failNext.CompareAndSwap(true, false) {
		return errors.New("injected disk failure")
	}
	return j.Log.Append(ctx, b)
}

// A storage failure stops the actor fail-stop: the client gets internal +
// 1011, nothing of the failed send is stored, and the session is
// interrupted (its window runs) and resumable, with the send retryable.
func TestAppendFailureInterruptsSession(t *testing.T) {
	l := openLog(t, t.TempDir())
	j := &flakyJournal{Log: l}
	r, err := New(Config{Journal: j, Store: l, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })

	c := newRecConn("c1")
	h := openNew(t, r, "alice", c)
	chat(t, h, c, "m1", "first")

	j.failNext.Store(true)
	if err := h.Send(t.Context(), "m2", "lost to the disk", nil); err != nil {
		t.Fatal(err)
	}
	if e := expect[*ErrorOut](t, c); e.Code != "internal" {
		t.Fatalf("error = %+v, want internal", e)
	}
	c.waitClosed(t, CloseInternal)
	h.Detach() // what the gateway does when the socket ends
	s := waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)
	if s.Meta.LastSeq != 2 {
		t.Fatalf("last seq %d after the failed append, want 2", s.Meta.LastSeq)
	}

	c2 := newRecConn("c2")
	h2 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 2, Conn: c2})
	if h2.Reason != ReasonResumed {
		t.Fatalf("reason %q, want resumed", h2.Reason)
	}
	expect[*SessionOut](t, c2)
	expect[*BatchOut](t, c2)
	if seq := chat(t, h2, c2, "m2", "lost to the disk"); seq != 3 {
		t.Fatalf("retried send stored as %d, want 3", seq)
	}
}
