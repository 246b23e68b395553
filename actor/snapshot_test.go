package actor

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// With appends in flight, an active actor's snapshot shows only what is
// durable, and reads nothing from the store.
func TestSnapshotActiveShowsOnlyDurable(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	e.j.hold()
	if err := h.Send(t.Context(), "m2", "slow disk", nil); err != nil {
		t.Fatal(err)
	}
	actortest.Eventually(t, "the send's append is held", func() bool { return e.j.heldCount() == 1 })
	e.j.resetCounts()
	s := e.snapshot("s", "alice")
	if s.Header.LastSeq != 2 || !reflect.DeepEqual(seqsOf(s.Messages), []uint64{1, 2}) || s.Status != wal.StatusActive {
		t.Fatalf("snapshot with an append in flight: last %d, messages %v", s.Header.LastSeq, seqsOf(s.Messages))
	}
	if e.j.reads.Load()+e.j.loads.Load() != 0 {
		t.Fatalf("an active snapshot read the store: %s", e.j.storeReads())
	}
	if rest := c.unread(); len(rest) != 0 {
		t.Fatalf("delivered before durable: %s", dumpOuts(rest))
	}
	e.j.release()
	expect[*machine.AckOut](t, c)
	expect[*machine.EntryOut](t, c)
	expect[*machine.EntryOut](t, c)
	if s := e.snapshot("s", "alice"); s.Header.LastSeq != 4 || !reflect.DeepEqual(seqsOf(s.Messages), span(1, 4)) {
		t.Fatalf("snapshot after: %+v", s)
	}
}

// A second send while the first append is in flight is appended at once;
// the acks arrive in order once the appends complete.
func TestPipelinedSendsEndToEnd(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	e.j.hold()
	for _, id := range []string{"m1", "m2", "m3"} {
		if err := h.Send(t.Context(), id, "x", nil); err != nil {
			t.Fatal(err)
		}
	}
	actortest.Eventually(t, "three appends in flight at once", func() bool { return e.j.heldCount() == 3 })
	if rest := c.unread(); len(rest) != 0 {
		t.Fatalf("delivered before durable: %s", dumpOuts(rest))
	}
	e.j.release()
	var acks []uint64
	actortest.Eventually(t, "all acks", func() bool {
		acks = acks[:0]
		for _, o := range c.all() {
			if a, ok := o.(*machine.AckOut); ok {
				acks = append(acks, a.Seq)
			}
		}
		return len(acks) == 3
	})
	// Echo answers in the same append: user entries are 1, 3, 5.
	if !reflect.DeepEqual(acks, []uint64{1, 3, 5}) {
		t.Fatalf("acks %v", acks)
	}
}

func TestSnapshotFromStore(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ReplayLimit = 3 })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	chats(t, h, c, 3, msg)
	if err := h.SetContext(t.Context(), map[string]any{"goal": "g"}); err != nil {
		t.Fatal(err)
	}
	expect[*machine.ContextOut](t, c)
	active := e.snapshot("s", "alice")
	h.Detach()
	e.passivate("s")
	e.j.resetCounts()
	stored := e.snapshot("s", "alice")
	if e.j.loads.Load() != 1 || e.j.reads.Load() != 1 {
		t.Fatalf("a passive snapshot: %s", e.j.storeReads())
	}
	if stored.Status != wal.StatusInterrupted || stored.Header.LastSeq != 6 || !reflect.DeepEqual(seqsOf(stored.Messages), span(4, 6)) ||
		!reflect.DeepEqual(stored.Context, map[string]any{"goal": "g"}) || stored.Pending != nil {
		t.Fatalf("stored snapshot = %+v", stored)
	}
	if !sameEntries(stored.Messages, active.Messages) || !reflect.DeepEqual(stored.Context, active.Context) {
		t.Fatalf("the stored snapshot differs from the active one:\n%+v\n%+v", stored, active)
	}
	if e.actorOf("s") != nil {
		t.Fatal("a snapshot activated the session")
	}
}

func TestSnapshotOwnershipAndReveal(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "receipt")
	if err := h.SetContext(t.Context(), map[string]any{"sensitive": true}); err != nil {
		t.Fatal(err)
	}
	expect[*machine.ContextOut](t, c)
	for _, passive := range []bool{false, true} {
		if passive {
			h.Detach()
			e.passivate("s")
		}
		now := e.clock.Now()
		if _, err := e.reg.Snapshot(t.Context(), "s", "mallory", now); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another user's snapshot: %v", err)
		}
		for _, auth := range []time.Time{{}, now.Add(-testReauth - time.Second)} {
			if _, err := e.reg.Snapshot(t.Context(), "s", "alice", auth); !errors.Is(err, machine.ErrReauthRequired) {
				t.Fatalf("passive=%v, auth_time %v: %v", passive, auth, err)
			}
		}
		s, err := e.reg.Snapshot(t.Context(), "s", "alice", now.Add(-time.Minute))
		if err != nil || s.Header.LastSeq != 2 || !s.Header.Sensitive {
			t.Fatalf("fresh login: %+v, %v", s, err)
		}
	}
}

// corrupt writes a state and a context the actor cannot read into sid's
// log, through the real log, while no actor holds it.
func corrupt(t *testing.T, l *wal.Log, sid string) {
	t.Helper()
	d, err := l.Claim(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}
	h := d.Header
	h.State = []byte{0xc1} // never used in msgpack
	// 70 nested arrays: deeper than the log's reader accepts.
	deep := append(bytes.Repeat([]byte{0x91}, 70), 0xc0)
	if err := appendSync(t.Context(), l, &wal.Batch{SessionID: sid, Epoch: h.Epoch, Header: h, Context: deep}); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background(), sid, h.Epoch); err != nil {
		t.Fatal(err)
	}
	if _, dmg := machine.Stored(wal.SessionData{Header: h, Context: deep}); dmg.State == nil || dmg.Context == nil {
		t.Fatalf("the state or the context is readable: %+v", dmg)
	}
}

// Unreadable state or context never makes a session unreachable for its
// owner or visible to anyone else: ownership is checked from the header
// first; the owner gets the session with a fresh state and context; it is
// counted; and the next append rewrites both.
func TestCorruptStateAndContext(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	h.Detach()
	e.passivate("s")
	corrupt(t, e.log, "s")

	if got := notResumedReason(e.resumeErr("s", "mallory", 0)); got != machine.ReasonNotFound {
		t.Fatalf("another user's resume: %q", got)
	}
	if _, err := e.reg.Snapshot(t.Context(), "s", "mallory", e.clock.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another user's snapshot: %v", err)
	}
	if n := e.reg.Stats().Corrupt; n != 0 {
		t.Fatalf("another user's probe decoded the session's data (%d corrupt)", n)
	}
	if s := e.snapshot("s", "alice"); s.Header.LastSeq != 2 || len(s.Context) != 0 || len(s.Messages) != 2 {
		t.Fatalf("owner's snapshot of a corrupt session: %+v", s)
	}
	if n := e.reg.Stats().Corrupt; n != 2 {
		t.Fatalf("Stats().Corrupt = %d after the snapshot, want 2 (state and context)", n)
	}
	c2 := newRecConn("c2")
	h2, so, b := e.resume("s", "alice", 0, c2)
	if len(so.Context) != 0 || so.Pending != nil || !reflect.DeepEqual(seqsOf(b.Messages), []uint64{1, 2}) {
		t.Fatalf("resume of a corrupt session: %+v %v", so, seqsOf(b.Messages))
	}
	if n := e.reg.Stats().Corrupt; n != 4 {
		t.Fatalf("Stats().Corrupt = %d after activation, want 4", n)
	}
	// The resume's own append rewrote both.
	e.settle("s")
	d, err := e.log.Load("s")
	if err != nil {
		t.Fatal(err)
	}
	if _, dmg := machine.Stored(d); dmg.State != nil || dmg.Context != nil || d.Context == nil {
		t.Fatalf("state or context not rewritten: %+v", dmg)
	}
	chat(t, h2, c2, "m2", "still works")
	if err := h2.SetContext(t.Context(), map[string]any{"goal": "new"}); err != nil {
		t.Fatal(err)
	}
	if co := expect[*machine.ContextOut](t, c2); !reflect.DeepEqual(co.Context, map[string]any{"goal": "new"}) {
		t.Fatalf("context = %v", co.Context)
	}
}
