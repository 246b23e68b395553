package actor

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/wal"
)

// Integration tests: real actors on a real Pebble log in t.TempDir().

func TestRegistryOpenNew(t *testing.T) {
	r, _, _ := setup(t, Config{})
	c := newRecConn("c")
	h := open(t, r, OpenRequest{UserID: "alice", Conn: c})
	if h.Reason != ReasonNew || h.SessionID == "" || len(h.SessionID) > wal.MaxIDLen {
		t.Fatalf("handle = %+v", h)
	}
	so := expect[*SessionOut](t, c)
	want := SessionOut{SessionID: h.SessionID, Resumed: false, Reason: ReasonNew, Status: wal.StatusActive, Window: 5 * time.Minute}
	if !reflect.DeepEqual(*so, want) {
		t.Fatalf("session frame = %+v, want %+v", *so, want)
	}
	// No history_batch follows a new session: the next frame answers a send.
	chat(t, h, c, "m1", "hello")
	if rest := c.unread(); len(rest) != 0 {
		t.Fatalf("unexpected frames %s", dumpOuts(rest))
	}
	s := snapshot(t, r, h.SessionID, "alice")
	if s.Status != wal.StatusActive || s.Meta.LastSeq != 2 || len(s.Messages) != 2 {
		t.Fatalf("snapshot = %+v", s)
	}
	if st := r.Stats(); st.Active != 1 || st.Activations != 1 {
		t.Fatalf("stats = %+v", st)
	}
	// Two new sessions get different ids.
	h2 := openNew(t, r, "alice", newRecConn("c2"))
	if h2.SessionID == h.SessionID {
		t.Fatal("two sessions share an id")
	}
}

func TestRegistrySendFlow(t *testing.T) {
	r, _, _ := setup(t, Config{})
	c := newRecConn("c")
	h := openNew(t, r, "alice", c)
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
	expect[*AckOut](t, c)
	if e := expect[*EntryOut](t, c).Entry; mdString(e, "lang") != "zh" || mdString(e, "id") != "m3" {
		t.Fatalf("user entry metadata %v", e.Metadata)
	}
	expect[*EntryOut](t, c)

	if err := h.SetContext(t.Context(), map[string]any{"goal": "laptops"}); err != nil {
		t.Fatal(err)
	}
	if co := expect[*ContextOut](t, c); !reflect.DeepEqual(co.Context, map[string]any{"goal": "laptops"}) {
		t.Fatalf("context = %v", co.Context)
	}
	s := snapshot(t, r, h.SessionID, "alice")
	if s.Meta.LastSeq != 6 || !reflect.DeepEqual(seqsOf(s.Messages), span(1, 6)) || s.Meta.Context["goal"] != "laptops" {
		t.Fatalf("snapshot = %+v", s)
	}
}

func TestRegistryResumeReplaysMissed(t *testing.T) {
	r, _, _ := setup(t, Config{})
	c1 := newRecConn("c1")
	h := openNew(t, r, "alice", c1)
	chat(t, h, c1, "m1", "one")
	chat(t, h, c1, "m2", "two")
	h.Detach()
	s := waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)
	if s.Meta.ExpiresAt.IsZero() {
		t.Fatal("interrupted without a window")
	}

	// The client saw up to seq 2; it gets exactly 3 and 4.
	c2 := newRecConn("c2")
	h2 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 2, Conn: c2})
	if h2.Reason != ReasonResumed || h2.SessionID != h.SessionID {
		t.Fatalf("handle = %+v", h2)
	}
	so := expect[*SessionOut](t, c2)
	if !so.Resumed || so.Reason != ReasonResumed || so.Status != wal.StatusActive || so.LastSeq != 4 || so.Window != 5*time.Minute {
		t.Fatalf("session frame = %+v", so)
	}
	b := expect[*BatchOut](t, c2)
	if !reflect.DeepEqual(seqsOf(b.Messages), []uint64{3, 4}) || b.Omitted != 0 || b.Summary != "" {
		t.Fatalf("batch = %+v", b)
	}
	if b.Messages[0].Content != "two" || b.Messages[1].Content != "Agent reply: two" {
		t.Fatalf("batch entries = %+v", b.Messages)
	}
	if st := snapshot(t, r, h.SessionID, "alice"); st.Meta.Status != wal.StatusActive {
		t.Fatalf("status after resume %s", st.Meta.Status)
	}

	// Nothing missed: an empty batch, still exactly one.
	h2.Detach()
	waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)
	c3 := newRecConn("c3")
	h3 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 4, Conn: c3})
	expect[*SessionOut](t, c3)
	if b := expect[*BatchOut](t, c3); len(b.Messages) != 0 || b.Omitted != 0 {
		t.Fatalf("empty batch = %+v", b)
	}
	chat(t, h3, c3, "m3", "three")
	if rest := c3.unread(); len(rest) != 0 {
		t.Fatalf("unexpected frames %s", dumpOuts(rest))
	}

	// A last_seq beyond the log is refused and changes nothing.
	h3.Detach()
	before := waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)
	c4 := newRecConn("c4")
	if _, err := r.Open(t.Context(), OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 99, Conn: c4}); !errors.Is(err, ErrBadLastSeq) {
		t.Fatalf("Open with last_seq 99: %v", err)
	}
	if len(c4.all()) != 0 {
		t.Fatalf("refused open delivered %s", dumpOuts(c4.all()))
	}
	if after := snapshot(t, r, h.SessionID, "alice"); !sameMeta(after.Meta, before.Meta) {
		t.Fatalf("refused open changed the session:\n%+v\n%+v", after.Meta, before.Meta)
	}
}

// twelve makes a session with 12 entries (6 exchanges) and detaches it.
func twelve(t *testing.T, r *Registry) (*Handle, *recConn) {
	t.Helper()
	c := newRecConn("c1")
	h := openNew(t, r, "alice", c)
	for i := range 6 {
		chat(t, h, c, "m"+string(rune('a'+i)), "message "+string(rune('a'+i)))
	}
	return h, c
}

func TestRegistryReplayLimit(t *testing.T) {
	r, _, _ := setup(t, Config{ReplayLimit: 5})
	h, _ := twelve(t, r)
	h.Detach()
	waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)

	c2 := newRecConn("c2")
	open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 0, Conn: c2})
	if so := expect[*SessionOut](t, c2); so.LastSeq != 12 {
		t.Fatalf("session frame = %+v", so)
	}
	b := expect[*BatchOut](t, c2)
	if !reflect.DeepEqual(seqsOf(b.Messages), span(8, 12)) || b.Omitted != 7 {
		t.Fatalf("batch seqs %v omitted %d, want 8..12 and 7", seqsOf(b.Messages), b.Omitted)
	}
	if b.Summary == "" || !strings.Contains(b.Summary, "7") || !strings.Contains(b.Summary, "before_seq=8") {
		t.Fatalf("summary = %q", b.Summary)
	}
	if rest := c2.unread(); len(rest) != 0 {
		t.Fatalf("more than one batch: %s", dumpOuts(rest))
	}
}

func TestRegistryHistoryPaging(t *testing.T) {
	r, _, _ := setup(t, Config{ReplayLimit: 5})
	h, c := twelve(t, r)
	page := func(before uint64, limit int) *BatchOut {
		t.Helper()
		if err := h.History(t.Context(), before, limit); err != nil {
			t.Fatal(err)
		}
		return expect[*BatchOut](t, c)
	}
	for _, tc := range []struct {
		before  uint64
		limit   int
		want    []uint64
		omitted uint64
	}{
		{0, 5, span(8, 12), 7},
		{8, 5, span(3, 7), 2},
		{3, 5, span(1, 2), 0},
		{1, 5, nil, 0},
		{0, 0, span(1, 12), 0},    // default limit
		{100, 3, span(10, 12), 9}, // beyond the end: the end
	} {
		b := page(tc.before, tc.limit)
		if got := seqsOf(b.Messages); !reflect.DeepEqual(got, append([]uint64{}, tc.want...)) || b.Omitted != tc.omitted {
			t.Fatalf("history before %d limit %d: seqs %v omitted %d, want %v and %d", tc.before, tc.limit, got, b.Omitted, tc.want, tc.omitted)
		}
	}
}

func TestRegistryIdempotentSend(t *testing.T) {
	r, _, _ := setup(t, Config{})
	c := newRecConn("c1")
	h := openNew(t, r, "alice", c)
	chat(t, h, c, "m1", "hello")

	// Same id again: the first ack, nothing stored, no reply.
	if err := h.Send(t.Context(), "m1", "hello (resent)", nil); err != nil {
		t.Fatal(err)
	}
	if ack := expect[*AckOut](t, c); ack.ID != "m1" || ack.Seq != 1 {
		t.Fatalf("repeat ack = %+v", ack)
	}
	if s := snapshot(t, r, h.SessionID, "alice"); s.Meta.LastSeq != 2 {
		t.Fatalf("last seq %d after a repeated send", s.Meta.LastSeq)
	}
	// The next frame is the next send's: nothing came between.
	chat(t, h, c, "m2", "next")

	// After a reconnect too.
	h.Detach()
	waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)
	c2 := newRecConn("c2")
	h2 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 4, Conn: c2})
	expect[*SessionOut](t, c2)
	expect[*BatchOut](t, c2)
	for _, id := range []string{"m1", "m2"} {
		if err := h2.Send(t.Context(), id, "resent", nil); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := expect[*AckOut](t, c2), expect[*AckOut](t, c2); *a != (AckOut{ID: "m1", Seq: 1}) || *b != (AckOut{ID: "m2", Seq: 3}) {
		t.Fatalf("acks after reconnect: %+v %+v", a, b)
	}
	if s := snapshot(t, r, h.SessionID, "alice"); s.Meta.LastSeq != 4 {
		t.Fatalf("last seq %d after resent sends", s.Meta.LastSeq)
	}
	chat(t, h2, c2, "m3", "new")
}

func TestRegistryOtherUserIsNotFound(t *testing.T) {
	r, _, _ := setup(t, Config{})
	c := newRecConn("alice")
	victim := openNew(t, r, "alice", c)
	chat(t, victim, c, "m1", "secret")
	if err := victim.SetContext(t.Context(), map[string]any{"goal": "private"}); err != nil {
		t.Fatal(err)
	}
	expect[*ContextOut](t, c)
	before := snapshot(t, r, victim.SessionID, "alice")

	for _, attached := range []bool{true, false} {
		if !attached {
			victim.Detach()
			before = waitStatus(t, r, victim.SessionID, "alice", wal.StatusInterrupted)
		}
		m := newRecConn("mallory")
		h := open(t, r, OpenRequest{SessionID: victim.SessionID, UserID: "mallory", LastSeq: 0, Conn: m})
		if h.Reason != ReasonNotFound || h.SessionID == victim.SessionID {
			t.Fatalf("mallory got %+v", h)
		}
		so := expect[*SessionOut](t, m)
		if so.Resumed || so.Reason != ReasonNotFound || so.SessionID != h.SessionID || so.LastSeq != 0 || len(so.Context) != 0 {
			t.Fatalf("mallory's session frame = %+v", so)
		}
		// Mallory's conn is on her own new session: no replay, and her
		// send lands there.
		chat(t, h, m, "x1", "hi")
		if rest := m.unread(); len(rest) != 0 {
			t.Fatalf("mallory got %s", dumpOuts(rest))
		}
		after := snapshot(t, r, victim.SessionID, "alice")
		if !sameMeta(after.Meta, before.Meta) || !reflect.DeepEqual(after.Messages, before.Messages) {
			t.Fatalf("victim changed:\n got %+v\nwant %+v", after.Meta, before.Meta)
		}
		if _, err := r.Snapshot(victim.SessionID, "mallory"); !errors.Is(err, wal.ErrNotFound) {
			t.Fatalf("mallory's snapshot of the victim: %v", err)
		}
		if attached && len(c.closeCodes()) != 0 {
			t.Fatalf("mallory's open closed alice's conn: %v", c.closeCodes())
		}
	}
	// Alice still resumes.
	c2 := newRecConn("alice2")
	open(t, r, OpenRequest{SessionID: victim.SessionID, UserID: "alice", LastSeq: 2, Conn: c2})
	if so := expect[*SessionOut](t, c2); !so.Resumed || so.Context["goal"] != "private" {
		t.Fatalf("alice's resume = %+v", so)
	}
}

func TestRegistryUnknownID(t *testing.T) {
	r, _, _ := setup(t, Config{})
	for _, id := range []string{"no-such-session", strings.Repeat("x", wal.MaxIDLen+1), "bad\x00id"} {
		c := newRecConn("c")
		h := open(t, r, OpenRequest{SessionID: id, UserID: "alice", Conn: c})
		so := expect[*SessionOut](t, c)
		if h.Reason != ReasonNotFound || so.Reason != ReasonNotFound || so.Resumed || h.SessionID == id {
			t.Fatalf("id %q: handle %+v frame %+v", id, h, so)
		}
		if _, err := r.Snapshot(id, "alice"); !errors.Is(err, wal.ErrNotFound) {
			t.Fatalf("Snapshot(%q): %v", id, err)
		}
	}
}

func TestRegistryWindowExpiry(t *testing.T) {
	clock := newFakeClock(time.Now())
	r, _, _ := setup(t, Config{Now: clock.Now})
	c := newRecConn("c1")
	h := openNew(t, r, "alice", c)
	chat(t, h, c, "m1", "hello")

	// Resumed with a second to spare.
	detachAt := clock.Now()
	h.Detach()
	s := waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)
	if !s.Meta.ExpiresAt.Equal(detachAt.Add(5 * time.Minute)) {
		t.Fatalf("expires at %v, want detach + window %v", s.Meta.ExpiresAt, detachAt.Add(5*time.Minute))
	}
	clock.Advance(5*time.Minute - time.Second)
	c2 := newRecConn("c2")
	h2 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 2, Conn: c2})
	if h2.Reason != ReasonResumed {
		t.Fatalf("resume inside the window: %+v", h2)
	}

	// The window restarts at the next detach, then passes.
	detachAt = clock.Now()
	h2.Detach()
	s = waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)
	if !s.Meta.ExpiresAt.Equal(detachAt.Add(5 * time.Minute)) {
		t.Fatalf("expires at %v after the second detach", s.Meta.ExpiresAt)
	}
	clock.Advance(5*time.Minute + time.Second)
	if s := snapshot(t, r, h.SessionID, "alice"); s.Status != wal.StatusExpired {
		t.Fatalf("snapshot status %s past the window", s.Status)
	}
	c3 := newRecConn("c3")
	h3 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 2, Conn: c3})
	if h3.Reason != ReasonExpired || h3.SessionID == h.SessionID {
		t.Fatalf("late open = %+v", h3)
	}
	so := expect[*SessionOut](t, c3)
	if so.Resumed || so.Reason != ReasonExpired || so.SessionID != h3.SessionID || so.LastSeq != 0 {
		t.Fatalf("late session frame = %+v", so)
	}
	if s := snapshot(t, r, h.SessionID, "alice"); s.Meta.Status != wal.StatusExpired {
		t.Fatalf("stored status %s", s.Meta.Status)
	}
	// Expired stays expired.
	c4 := newRecConn("c4")
	if h4 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", Conn: c4}); h4.Reason != ReasonExpired {
		t.Fatalf("second late open = %+v", h4)
	}
}

func TestRegistryComplete(t *testing.T) {
	r, _, _ := setup(t, Config{})
	c := newRecConn("c1")
	h := openNew(t, r, "alice", c)
	chat(t, h, c, "m1", "hello")
	if err := h.Complete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if co := expect[*CompletedOut](t, c); co.SessionID != h.SessionID {
		t.Fatalf("completed = %+v", co)
	}
	c.waitClosed(t, CloseNormal)
	if s := snapshot(t, r, h.SessionID, "alice"); s.Meta.Status != wal.StatusCompleted || s.Status != wal.StatusCompleted {
		t.Fatalf("status %s", s.Meta.Status)
	}
	h.Detach() // the gateway's usual teardown: harmless

	c2 := newRecConn("c2")
	h2 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 2, Conn: c2})
	if h2.Reason != ReasonCompleted || h2.SessionID == h.SessionID {
		t.Fatalf("open after complete = %+v", h2)
	}
	if so := expect[*SessionOut](t, c2); so.Reason != ReasonCompleted || so.Resumed {
		t.Fatalf("session frame = %+v", so)
	}
}

func TestRegistrySupersede(t *testing.T) {
	r, _, _ := setup(t, Config{})
	c1 := newRecConn("c1")
	h1 := openNew(t, r, "alice", c1)
	chat(t, h1, c1, "m1", "hello")

	c2 := newRecConn("c2")
	h2 := open(t, r, OpenRequest{SessionID: h1.SessionID, UserID: "alice", LastSeq: 2, Conn: c2})
	if h2.Reason != ReasonResumed {
		t.Fatalf("second open = %+v", h2)
	}
	c1.waitClosed(t, CloseSuperseded)
	expect[*SessionOut](t, c2)
	expect[*BatchOut](t, c2)

	// The first conn goes away late: the session stays active on c2, and
	// c1 can no longer send.
	h1.Detach()
	if err := h1.Send(t.Context(), "ghost", "from the old conn", nil); err != nil {
		t.Fatal(err)
	}
	chat(t, h2, c2, "m2", "still here") // mailbox order: runs after both
	if s := snapshot(t, r, h1.SessionID, "alice"); s.Meta.Status != wal.StatusActive || s.Meta.LastSeq != 4 {
		t.Fatalf("after the superseded detach: status %s last seq %d", s.Meta.Status, s.Meta.LastSeq)
	}
	if rest := c1.unread(); len(rest) != 0 {
		t.Fatalf("the superseded conn got %s", dumpOuts(rest))
	}
}

func TestRegistrySensitiveNeedsFreshLogin(t *testing.T) {
	r, _, _ := setup(t, Config{})
	c := newRecConn("c1")
	h := openNew(t, r, "alice", c)
	if err := h.SetContext(t.Context(), map[string]any{"sensitive": true}); err != nil {
		t.Fatal(err)
	}
	expect[*ContextOut](t, c)
	h.Detach()
	before := waitStatus(t, r, h.SessionID, "alice", wal.StatusInterrupted)

	for _, auth := range []time.Time{{}, time.Now().Add(-time.Hour)} {
		c2 := newRecConn("stale")
		_, err := r.Open(t.Context(), OpenRequest{SessionID: h.SessionID, UserID: "alice", AuthTime: auth, Conn: c2})
		if !errors.Is(err, ErrReauthRequired) {
			t.Fatalf("auth_time %v: %v", auth, err)
		}
		if len(c2.all()) != 0 || len(c2.closeCodes()) != 0 {
			t.Fatalf("refused open touched the conn: %s", dumpOuts(c2.all()))
		}
		if after := snapshot(t, r, h.SessionID, "alice"); !sameMeta(after.Meta, before.Meta) {
			t.Fatal("refused open changed the session")
		}
	}
	c3 := newRecConn("fresh")
	h3 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", AuthTime: time.Now(), Conn: c3})
	if so := expect[*SessionOut](t, c3); h3.Reason != ReasonResumed || !so.Sensitive {
		t.Fatalf("fresh login: %+v %+v", h3, so)
	}
}
