package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ---- helpers shared by the tests and benchmarks of this package ----

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openLog opens a Log in dir with the background sweeper disabled and a
// silent logger; mod may change the config further. The log is closed at
// the end of the test.
func openLog(tb testing.TB, dir string, mod ...func(*Config)) *Log {
	tb.Helper()
	cfg := Config{Dir: dir, SweepInterval: -1, Logger: quiet}
	for _, f := range mod {
		f(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%s): %v", dir, err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

func newTestLog(tb testing.TB, mod ...func(*Config)) *Log {
	tb.Helper()
	return openLog(tb, tb.TempDir(), mod...)
}

var t0 = time.Unix(1_700_000_000, 0)

func entry(seq uint64) Entry {
	return Entry{
		Seq:     seq,
		Role:    []string{"user", "assistant", "tool"}[seq%3],
		Content: fmt.Sprintf("message %d", seq),
		Time:    float64(t0.Unix()) + float64(seq),
	}
}

func entries(from, to uint64) []Entry {
	var out []Entry
	for s := from; s <= to; s++ {
		out = append(out, entry(s))
	}
	return out
}

func activeMeta(sid string) Meta {
	return Meta{SessionID: sid, UserID: "u-" + sid, Status: StatusActive, CreatedAt: t0, LastActiveAt: t0}
}

// batch is an append of entries from..to (none when to < from) whose
// metadata is base with LastSeq set to match.
func batch(base Meta, epoch, from, to uint64) Batch {
	m := base
	m.LastSeq = to
	if to < from {
		m.LastSeq = from - 1
	}
	return Batch{SessionID: base.SessionID, Epoch: epoch, Entries: entries(from, to), Meta: m}
}

func mustCreate(tb testing.TB, l *Log, m Meta) Meta {
	tb.Helper()
	got, err := l.Create(context.Background(), m)
	if err != nil {
		tb.Fatalf("Create(%q): %v", m.SessionID, err)
	}
	return got
}

func mustAppend(tb testing.TB, l *Log, b Batch) {
	tb.Helper()
	if err := l.Append(context.Background(), b); err != nil {
		tb.Fatalf("Append(%q, epoch %d, %d entries): %v", b.SessionID, b.Epoch, len(b.Entries), err)
	}
}

func mustMeta(tb testing.TB, l *Log, sid string) Meta {
	tb.Helper()
	m, err := l.Meta(sid)
	if err != nil {
		tb.Fatalf("Meta(%q): %v", sid, err)
	}
	return m
}

func seqs(es []Entry) []uint64 {
	out := make([]uint64, 0, len(es))
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func span(from, to uint64) []uint64 {
	out := []uint64{}
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// checkEntries verifies that es are exactly want, with the content entry()
// gives them.
func checkEntries(tb testing.TB, what string, es []Entry, want []uint64) {
	tb.Helper()
	if got := seqs(es); !reflect.DeepEqual(got, want) {
		tb.Fatalf("%s: seqs %v, want %v", what, got, want)
	}
	for _, e := range es {
		w := entry(e.Seq)
		if e.Role != w.Role || e.Content != w.Content || e.Time != w.Time {
			tb.Fatalf("%s: entry %d = %+v, want %+v", what, e.Seq, e, w)
		}
	}
}

func readAll(tb testing.TB, l *Log, sid string) []Entry {
	tb.Helper()
	es, err := l.ReadAfter(sid, 0, 1<<30)
	if err != nil {
		tb.Fatalf("ReadAfter(%q, 0): %v", sid, err)
	}
	return es
}

// ---- 1. basics ----

func TestCreateAppendRead(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	base := activeMeta("s1")
	base.Context = map[string]any{"goal": "book a train"}
	base.Sensitive = true

	created := mustCreate(t, l, base)
	if created.Epoch != 1 || created.LastSeq != 0 || created.SessionID != "s1" || created.UserID != "u-s1" {
		t.Fatalf("Create returned %+v, want epoch 1, last seq 0", created)
	}
	m := mustMeta(t, l, "s1")
	if m.Epoch != 1 || m.LastSeq != 0 || m.Status != StatusActive || !m.Sensitive || m.Context["goal"] != "book a train" || !m.CreatedAt.Equal(t0) {
		t.Fatalf("stored meta %+v", m)
	}
	if es := readAll(t, l, "s1"); len(es) != 0 {
		t.Fatalf("new session has entries %v", seqs(es))
	}

	// Three batches: 1..3 (with two send ids), 4, 5..10.
	b := batch(base, 1, 1, 3)
	b.Sends = map[string]uint64{"send-a": 1, "send-b": 3}
	b.Entries[1].Metadata = map[string]any{"tool": "search"}
	mustAppend(t, l, b)
	mustAppend(t, l, batch(base, 1, 4, 4))
	b = batch(base, 1, 5, 10)
	b.Meta.Turns = []uint64{9}
	mustAppend(t, l, b)

	m = mustMeta(t, l, "s1")
	if m.LastSeq != 10 || m.Epoch != 1 || !reflect.DeepEqual(m.Turns, []uint64{9}) || m.UserID != "u-s1" {
		t.Fatalf("meta after appends: %+v", m)
	}
	all := readAll(t, l, "s1")
	checkEntries(t, "all", all, span(1, 10))
	if all[1].Metadata["tool"] != "search" {
		t.Fatalf("entry 2 metadata %v", all[1].Metadata)
	}

	reads := []struct {
		name string
		read func() ([]Entry, error)
		want []uint64
	}{
		{"after 0", func() ([]Entry, error) { return l.ReadAfter("s1", 0, 100) }, span(1, 10)},
		{"after 3 limit 4", func() ([]Entry, error) { return l.ReadAfter("s1", 3, 4) }, span(4, 7)},
		{"after 9", func() ([]Entry, error) { return l.ReadAfter("s1", 9, 100) }, span(10, 10)},
		{"after 10", func() ([]Entry, error) { return l.ReadAfter("s1", 10, 100) }, nil},
		{"after 50", func() ([]Entry, error) { return l.ReadAfter("s1", 50, 100) }, nil},
		{"after 0 limit 0", func() ([]Entry, error) { return l.ReadAfter("s1", 0, 0) }, nil},
		{"after 0 limit -1", func() ([]Entry, error) { return l.ReadAfter("s1", 0, -1) }, nil},
		{"before end limit 3", func() ([]Entry, error) { return l.ReadBefore("s1", 0, 3) }, span(8, 10)},
		{"before end limit 100", func() ([]Entry, error) { return l.ReadBefore("s1", 0, 100) }, span(1, 10)},
		{"before end limit 10", func() ([]Entry, error) { return l.ReadBefore("s1", 0, 10) }, span(1, 10)},
		{"before 5 limit 3", func() ([]Entry, error) { return l.ReadBefore("s1", 5, 3) }, span(2, 4)},
		{"before 3 limit 10", func() ([]Entry, error) { return l.ReadBefore("s1", 3, 10) }, span(1, 2)},
		{"before 2 limit 1", func() ([]Entry, error) { return l.ReadBefore("s1", 2, 1) }, span(1, 1)},
		{"before 1", func() ([]Entry, error) { return l.ReadBefore("s1", 1, 10) }, nil},
		{"before 11 limit 2", func() ([]Entry, error) { return l.ReadBefore("s1", 11, 2) }, span(9, 10)},
		{"before 1000 limit 2", func() ([]Entry, error) { return l.ReadBefore("s1", 1000, 2) }, span(9, 10)},
		{"before end limit 0", func() ([]Entry, error) { return l.ReadBefore("s1", 0, 0) }, nil},
		{"unknown session after", func() ([]Entry, error) { return l.ReadAfter("nope", 0, 10) }, nil},
		{"unknown session before", func() ([]Entry, error) { return l.ReadBefore("nope", 0, 10) }, nil},
	}
	for _, r := range reads {
		es, err := r.read()
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if r.want == nil {
			r.want = []uint64{}
		}
		checkEntries(t, r.name, es, r.want)
	}

	for id, want := range map[string]uint64{"send-a": 1, "send-b": 3} {
		seq, ok, err := l.SendSeq("s1", id)
		if err != nil || !ok || seq != want {
			t.Fatalf("SendSeq(s1, %s) = %d, %v, %v; want %d, true, nil", id, seq, ok, err, want)
		}
	}
	for _, c := range [][2]string{{"s1", "unknown"}, {"s1", ""}, {"nope", "send-a"}} {
		seq, ok, err := l.SendSeq(c[0], c[1])
		if seq != 0 || ok || err != nil {
			t.Fatalf("SendSeq(%q, %q) = %d, %v, %v; want 0, false, nil", c[0], c[1], seq, ok, err)
		}
	}

	// Release ends the claim; a new Claim bumps the epoch and continues the
	// seqs where they were.
	if err := l.Release(ctx, "s1", 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, batch(base, 1, 11, 11)); !errors.Is(err, ErrNotClaimed) {
		t.Fatalf("append after release: %v, want ErrNotClaimed", err)
	}
	c, err := l.Claim(ctx, "s1")
	if err != nil || c.Epoch != 2 || c.LastSeq != 10 {
		t.Fatalf("Claim = %+v, %v; want epoch 2, last seq 10", c, err)
	}
	mustAppend(t, l, batch(base, 2, 11, 11))
	if m := mustMeta(t, l, "s1"); m.Epoch != 2 || m.LastSeq != 11 {
		t.Fatalf("meta after claim+append: epoch %d last %d", m.Epoch, m.LastSeq)
	}
	// An append without entries updates only the metadata.
	b = batch(base, 2, 12, 11)
	b.Meta.Status = StatusInterrupted
	mustAppend(t, l, b)
	if m := mustMeta(t, l, "s1"); m.Status != StatusInterrupted || m.LastSeq != 11 {
		t.Fatalf("meta-only append: %+v", m)
	}
	checkEntries(t, "final", readAll(t, l, "s1"), span(1, 11))

	st := l.Stats()
	if st.Entries != 11 || st.Syncs == 0 || st.Requests < st.Syncs {
		t.Fatalf("stats %+v", st)
	}
}

func TestSixtyFourByteIDIsValid(t *testing.T) {
	l := newTestLog(t)
	sid := strings.Repeat("x", MaxIDLen)
	mustCreate(t, l, activeMeta(sid))
	mustAppend(t, l, batch(activeMeta(sid), 1, 1, 2))
	checkEntries(t, "64-byte id", readAll(t, l, sid), span(1, 2))
}

// ---- 2. fence and input errors ----

func TestFence(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	base := activeMeta("f")
	mustCreate(t, l, base)
	mustAppend(t, l, batch(base, 1, 1, 2))

	c, err := l.Claim(ctx, "f")
	if err != nil || c.Epoch != 2 || c.LastSeq != 2 {
		t.Fatalf("Claim = %+v, %v", c, err)
	}
	if err := l.Append(ctx, batch(base, 1, 3, 3)); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("append with epoch 1 after claim 2: %v, want ErrStaleEpoch", err)
	}
	// The stale owner's Release must not drop the new owner's claim.
	if err := l.Release(ctx, "f", 1); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, batch(base, 2, 3, 3))
	// An epoch from the future is not the claim either.
	if err := l.Append(ctx, batch(base, 3, 4, 4)); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("append with epoch 3 while claimed at 2: %v, want ErrStaleEpoch", err)
	}
	if m := mustMeta(t, l, "f"); m.Epoch != 2 || m.LastSeq != 3 {
		t.Fatalf("meta %+v", m)
	}
	checkEntries(t, "after fence", readAll(t, l, "f"), span(1, 3))
}

func TestAppendErrors(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	base := activeMeta("a")
	mustCreate(t, l, base)
	b := batch(base, 1, 1, 5)
	b.Sends = map[string]uint64{"ok": 5}
	mustAppend(t, l, b)

	wantMeta := mustMeta(t, l, "a")
	wantEntries := readAll(t, l, "a")
	unchanged := func(what string) {
		t.Helper()
		if m := mustMeta(t, l, "a"); !reflect.DeepEqual(m, wantMeta) {
			t.Fatalf("%s changed the metadata:\n got %+v\nwant %+v", what, m, wantMeta)
		}
		if es := readAll(t, l, "a"); !reflect.DeepEqual(es, wantEntries) {
			t.Fatalf("%s changed the log: %v", what, seqs(es))
		}
		if _, ok, err := l.SendSeq("a", "bad"); ok || err != nil {
			t.Fatalf("%s stored its send id (ok=%v err=%v)", what, ok, err)
		}
		if _, err := l.ReadAfter("a", 5, 10); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	withSend := func(b Batch) Batch { b.Sends = map[string]uint64{"bad": 6}; b.Meta.Status = StatusCompleted; return b }
	cases := []struct {
		name string
		b    Batch
		is   error
	}{
		{"gap", withSend(batch(base, 1, 7, 8)), ErrSeqGap},
		{"repeat last", withSend(batch(base, 1, 5, 6)), ErrSeqGap},
		{"restart at 1", withSend(batch(base, 1, 1, 1)), ErrSeqGap},
		{"hole inside batch", func() Batch {
			b := withSend(batch(base, 1, 6, 8))
			b.Entries = append(b.Entries[:1], b.Entries[2:]...)
			return b
		}(), ErrSeqGap},
		{"seq 0", func() Batch {
			b := withSend(batch(base, 1, 6, 6))
			b.Entries[0].Seq = 0
			return b
		}(), ErrSeqGap},
		{"stale epoch", withSend(batch(base, 0, 6, 6)), ErrStaleEpoch},
		{"meta last seq wrong", func() Batch {
			b := withSend(batch(base, 1, 6, 7))
			b.Meta.LastSeq = 6
			return b
		}(), nil},
		{"meta names other session", func() Batch {
			b := withSend(batch(base, 1, 6, 6))
			b.Meta.SessionID = "other"
			return b
		}(), nil},
	}
	for _, c := range cases {
		err := l.Append(ctx, c.b)
		if err == nil {
			t.Fatalf("%s: append succeeded", c.name)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.is)
		}
		unchanged(c.name)
	}

	// Not claimed: a session that was never created, and one released.
	if err := l.Append(ctx, batch(activeMeta("ghost"), 1, 1, 1)); !errors.Is(err, ErrNotClaimed) {
		t.Fatalf("append to unknown session: %v, want ErrNotClaimed", err)
	}
	if _, err := l.Meta("ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed append created the session: %v", err)
	}
	if err := l.Release(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, withSend(batch(base, 1, 6, 6))); !errors.Is(err, ErrNotClaimed) {
		t.Fatalf("append after release: %v, want ErrNotClaimed", err)
	}
	unchanged("append after release")

	// Create and Claim errors.
	if _, err := l.Create(ctx, activeMeta("a")); !errors.Is(err, ErrExists) {
		t.Fatalf("Create existing: %v, want ErrExists", err)
	}
	unchanged("Create existing")
	if _, err := l.Claim(ctx, "ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Claim unknown: %v, want ErrNotFound", err)
	}
	if _, err := l.Meta("ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Meta unknown: %v, want ErrNotFound", err)
	}
	if err := l.Append(ctx, batch(activeMeta("ghost"), 1, 1, 1)); !errors.Is(err, ErrNotClaimed) {
		t.Fatalf("a failed Claim left a claim behind: %v", err)
	}
}

func TestBadIDs(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	bad := map[string]string{
		"empty":    "",
		"65 bytes": strings.Repeat("x", MaxIDLen+1),
		"NUL":      "ab\x00cd",
		"NUL end":  "ab\x00",
	}
	for name, sid := range bad {
		t.Run(name, func(t *testing.T) {
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, ErrBadID) {
					t.Errorf("%s(%q): %v, want ErrBadID", op, sid, err)
				}
			}
			_, err := l.Create(ctx, activeMeta(sid))
			check("Create", err)
			_, err = l.Claim(ctx, sid)
			check("Claim", err)
			check("Append", l.Append(ctx, batch(activeMeta(sid), 1, 1, 1)))
			_, err = l.Meta(sid)
			check("Meta", err)
			_, err = l.ReadAfter(sid, 0, 10)
			check("ReadAfter", err)
			_, err = l.ReadBefore(sid, 0, 10)
			check("ReadBefore", err)
			_, err = l.DeleteSession(ctx, sid, nil)
			check("DeleteSession", err)
		})
	}
	if st := l.Stats(); st.Requests != 0 {
		t.Fatalf("bad ids reached the committer: %+v", st)
	}
}

// SendSeq is the one reader that does not validate its session id: a bad
// id is answered with "not seen" instead of ErrBadID.
func TestSendSeqBadID(t *testing.T) {
	l := newTestLog(t)
	for _, sid := range []string{"", strings.Repeat("x", MaxIDLen+1), "a\x00b"} {
		if _, _, err := l.SendSeq(sid, "x"); !errors.Is(err, ErrBadID) {
			t.Errorf("SendSeq(%q): %v, want ErrBadID", sid, err)
		}
	}
}

// ---- 3. durability across reopen, Close ----
