package actor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/actor/machine/machinetest"
	"github.com/tether-dev/tether/wal"
)

func TestRegistrySendFlow(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	if seq := chat(t, h, c, "m1", "hello"); seq != 1 {
		t.Fatalf("first seq %d", seq)
	}
	if seq := chat(t, h, c, "m2", "again"); seq != 3 {
		t.Fatalf("second seq %d", seq)
	}
	// Metadata travels with the user entry, next to the send id.
	if err := h.Send(t.Context(), "m3", "with md", map[string]any{"lang": "zh"}); err != nil {
		t.Fatal(err)
	}
	expect[*machine.AckOut](t, c)
	if en := expect[*machine.EntryOut](t, c).Entry; machinetest.MetaString(en, "lang") != "zh" || machinetest.MetaString(en, "id") != "m3" {
		t.Fatalf("user entry metadata %v", en.Metadata)
	}
	expect[*machine.EntryOut](t, c)
	if err := h.SetContext(t.Context(), map[string]any{"goal": "laptops"}); err != nil {
		t.Fatal(err)
	}
	if co := expect[*machine.ContextOut](t, c); !reflect.DeepEqual(co.Context, map[string]any{"goal": "laptops"}) {
		t.Fatalf("context = %v", co.Context)
	}
	// Too large a context is refused, and the connection stays usable.
	if err := h.SetContext(t.Context(), map[string]any{"big": strings.Repeat("x", 70<<10)}); err != nil {
		t.Fatal(err)
	}
	if eo := expect[*machine.ErrorOut](t, c); eo.Code != machine.CodeTooLarge {
		t.Fatalf("error = %+v", eo)
	}
	s := e.snapshot("s", "alice")
	if s.Header.LastSeq != 6 || !reflect.DeepEqual(seqsOf(s.Messages), span(1, 6)) || !reflect.DeepEqual(s.Context, map[string]any{"goal": "laptops"}) {
		t.Fatalf("snapshot = %+v", s)
	}
	if got := e.entriesOf("s"); !sameEntries(got, s.Messages) {
		t.Fatalf("the log differs from memory:\n%+v\n%+v", got, s.Messages)
	}
}

// twelve makes a session with 12 entries (6 exchanges).
func twelve(t *testing.T, e *env) (*Handle, *recConn) {
	t.Helper()
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	chats(t, h, c, 6, func(i int) string { return fmt.Sprint("message ", i) })
	return h, c
}

func TestRegistryReplayLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ReplayLimit = 5 })
	h, _ := twelve(t, e)
	h.Detach()
	e.waitStatus("s", wal.StatusInterrupted)
	c2 := newRecConn("c2")
	_, so, b := e.resume("s", "alice", 0, c2)
	if so.LastSeq != 12 {
		t.Fatalf("session frame = %+v", so)
	}
	if !reflect.DeepEqual(seqsOf(b.Messages), span(8, 12)) || b.Omitted != 7 {
		t.Fatalf("batch seqs %v omitted %d, want 8..12 and 7", seqsOf(b.Messages), b.Omitted)
	}
	if !strings.Contains(b.Summary, "7 earlier entries (seq 1–7)") || !strings.Contains(b.Summary, "before_seq=8") ||
		!strings.Contains(b.Summary, `user: "message 0"`) {
		t.Fatalf("summary = %q", b.Summary)
	}
	if rest := c2.unread(); len(rest) != 0 {
		t.Fatalf("more than one batch: %s", dumpOuts(rest))
	}
}

func TestRegistryHistoryPaging(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ReplayLimit = 5 })
	h, c := twelve(t, e)
	for _, tc := range []struct {
		before  uint64
		limit   int
		want    []uint64
		omitted uint64
	}{
		{0, 5, span(8, 12), 7},
		{8, 5, span(3, 7), 2},
		{3, 5, span(1, 2), 0},
		{1, 5, []uint64{}, 0},
		{0, 0, span(1, 12), 0},    // default limit
		{100, 3, span(10, 12), 9}, // beyond the end: the end
		{0, 1000, span(1, 12), 0}, // capped at MaxHistoryLimit
	} {
		if err := h.History(t.Context(), tc.before, tc.limit); err != nil {
			t.Fatal(err)
		}
		b := expect[*machine.BatchOut](t, c)
		if got := seqsOf(b.Messages); !reflect.DeepEqual(got, tc.want) || b.Omitted != tc.omitted {
			t.Fatalf("history before %d limit %d: seqs %v omitted %d, want %v and %d", tc.before, tc.limit, got, b.Omitted, tc.want, tc.omitted)
		}
	}
}

func TestRegistryIdempotentSend(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	// Same id again: the first ack, nothing stored, no reply.
	if err := h.Send(t.Context(), "m1", "hello (resent)", nil); err != nil {
		t.Fatal(err)
	}
	if ack := expect[*machine.AckOut](t, c); *ack != (machine.AckOut{ID: "m1", Seq: 1}) {
		t.Fatalf("repeat ack = %+v", ack)
	}
	chat(t, h, c, "m2", "next") // nothing came between
	// After a reconnect to the same actor too.
	h.Detach()
	e.waitStatus("s", wal.StatusInterrupted)
	c2 := newRecConn("c2")
	h2, _, _ := e.resume("s", "alice", 4, c2)
	for _, id := range []string{"m1", "m2"} {
		if err := h2.Send(t.Context(), id, "resent", nil); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := expect[*machine.AckOut](t, c2), expect[*machine.AckOut](t, c2); *a != (machine.AckOut{ID: "m1", Seq: 1}) || *b != (machine.AckOut{ID: "m2", Seq: 3}) {
		t.Fatalf("acks after reconnect: %+v %+v", a, b)
	}
	chat(t, h2, c2, "m3", "new")
	if hd := e.header("s"); hd.LastSeq != 6 {
		t.Fatalf("last seq %d after resent sends", hd.LastSeq)
	}
}

func TestRegistryPassivation(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	if err := h.SetContext(t.Context(), map[string]any{"goal": "g"}); err != nil {
		t.Fatal(err)
	}
	expect[*machine.ContextOut](t, c)
	// Attached, it never passivates, however long it is quiet.
	e.settle("s")
	e.clock.Advance(10 * testIdle)
	e.settle("s")
	if e.actorOf("s") == nil {
		t.Fatal("an attached session passivated")
	}
	h.Detach()
	e.passivate("s")
	if st := e.reg.Stats(); st.Passivations != 1 || st.Activations != 1 || st.Active != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if hd := e.header("s"); hd.Status != wal.StatusInterrupted {
		t.Fatalf("passivated status %s", hd.Status)
	}
	// A resume activates it again from the log, context and all.
	c2 := newRecConn("c2")
	h2, so, b := e.resume("s", "alice", 0, c2)
	if so.LastSeq != 2 || so.Context["goal"] != "g" || !reflect.DeepEqual(seqsOf(b.Messages), []uint64{1, 2}) ||
		b.Messages[1].Content != "Agent reply: hello" {
		t.Fatalf("resume: %+v %+v", so, b)
	}
	if seq := chat(t, h2, c2, "m2", "back"); seq != 3 {
		t.Fatalf("seq after reactivation %d", seq)
	}
	if st := e.reg.Stats(); st.Activations != 2 || st.Active != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

// A hello whose context ends while its attach waits in the actor's mailbox
// gets ctx.Err() and no Handle; the attach still happens, so the registry
// queues its undo right behind it and the session ends up interrupted,
// not attached to a connection nobody will ever detach.
func TestResumeCancelledWhileQueued(t *testing.T) {
	e := newEnv(t)
	c1 := newStallConn("c1")
	t.Cleanup(c1.release) // before the registry closes
	h1, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "s", UserID: "alice", Conn: c1})
	if err != nil {
		t.Fatal(err)
	}
	expect[*machine.SessionOut](t, c1.recConn)
	// The actor blocks delivering the ack of this send.
	c1.armed.Store(true)
	if err := h1.Send(t.Context(), "m1", "hello", nil); err != nil {
		t.Fatal(err)
	}
	actortest.Recv(t, "the actor to stall", c1.stalled)

	a := e.actorOf("s")
	ctx, cancel := context.WithCancel(t.Context())
	c2 := newRecConn("c2")
	errc := make(chan error, 1)
	go func() {
		_, err := e.reg.Resume(ctx, ResumeRequest{SessionID: "s", UserID: "alice", Conn: c2})
		errc <- err
	}()
	actortest.Eventually(t, "the hello is queued", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.queue) > 0
	})
	cancel()
	if err := actortest.Recv(t, "Resume", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Resume: %v, want context.Canceled", err)
	}
	c1.armed.Store(false)
	c1.release()
	// The attach is carried out after all, then undone.
	expect[*machine.SessionOut](t, c2)
	c1.waitClosed(t, machine.CloseSuperseded)
	// Interrupted: the machine marks it so only once no connection is
	// attached.
	e.waitStatus("s", wal.StatusInterrupted)
	e.settle("s")
}
