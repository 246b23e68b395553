package actor

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/wal"
)

// countingStore counts the retention sweeps run on a real log.
type countingStore struct {
	*wal.Log
	sweeps atomic.Int32
}

func (s *countingStore) Sweep(ctx context.Context) (int, error) {
	defer s.sweeps.Add(1)
	return s.Log.Sweep(ctx)
}

// The registry sweeps only after its boot recovery: a session that was
// interrupted, within its window, when the node stopped looks expired and
// past its retention by the wall clock after a long downtime, but it was
// alive at the stop, so recovery extends its window and no sweep deletes it.
func TestSweepRunsAfterRecovery(t *testing.T) {
	clock := newFakeClock(t0)
	l, err := wal.New(wal.Config{Dir: t.TempDir(), SweepInterval: -1, Retention: time.Second, Now: clock.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	store := &countingStore{Log: l}
	cfg := Config{Journal: l, Store: store, Window: time.Minute, Now: clock.Now, Logger: quiet, SweepInterval: time.Millisecond}

	r1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := newRecConn("c1")
	h := openNew(t, r1, "alice", c)
	chat(t, h, c, "m1", "hello")
	h.Detach()
	waitStatus(t, r1, h.SessionID, "alice", wal.StatusInterrupted)
	if err := r1.Close(); err != nil { // records the node alive at t0
		t.Fatal(err)
	}

	clock.Advance(2 * time.Hour) // the node was down far longer than window + retention
	r2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r2.Close() })
	eventually(t, "two sweeps", func() bool { return store.sweeps.Load() >= 2 })

	s := snapshot(t, r2, h.SessionID, "alice")
	if s.Status != wal.StatusInterrupted || !s.Meta.ExpiresAt.After(clock.Now()) {
		t.Fatalf("after restart: status %s, expires %v (now %v); want interrupted with its window extended", s.Status, s.Meta.ExpiresAt, clock.Now())
	}
	c2 := newRecConn("c2")
	if h2 := open(t, r2, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 2, Conn: c2}); h2.Reason != ReasonResumed {
		t.Fatalf("reason %q, want resumed", h2.Reason)
	}
}
