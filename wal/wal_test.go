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

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := New(Config{Dir: dir, SweepInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	base := activeMeta("r")
	base.AgentContext = map[string]any{"summary": "so far"}
	base.Pending = &ToolCall{CallID: "c1", Name: "search", Status: "running", Partial: "half", StartedSeq: 19, ReplyTo: 18}
	mustCreate(t, l, base)
	for s := uint64(1); s <= 20; s += 4 {
		b := batch(base, 1, s, s+3)
		b.Sends = map[string]uint64{fmt.Sprintf("send-%d", s): s}
		mustAppend(t, l, b)
	}
	mustCreate(t, l, activeMeta("other"))
	alive := t0.Add(42 * time.Second)
	if err := l.MarkAlive(ctx, alive); err != nil {
		t.Fatal(err)
	}
	before := mustMeta(t, l, "r")
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	l = openLog(t, dir)
	after := mustMeta(t, l, "r")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("meta changed across reopen:\n got %+v\nwant %+v", after, before)
	}
	if after.LastSeq != 20 || after.Epoch != 1 || after.Pending == nil || after.Pending.Partial != "half" || after.AgentContext["summary"] != "so far" {
		t.Fatalf("meta after reopen %+v", after)
	}
	checkEntries(t, "after reopen", readAll(t, l, "r"), span(1, 20))
	for s := uint64(1); s <= 20; s += 4 {
		if seq, ok, err := l.SendSeq("r", fmt.Sprintf("send-%d", s)); !ok || err != nil || seq != s {
			t.Fatalf("SendSeq send-%d after reopen = %d, %v, %v", s, seq, ok, err)
		}
	}
	if m := mustMeta(t, l, "other"); m.Epoch != 1 || m.LastSeq != 0 {
		t.Fatalf("other %+v", m)
	}
	if got, ok, err := l.LastAlive(); err != nil || !ok || !got.Equal(alive) {
		t.Fatalf("LastAlive after reopen = %v, %v, %v", got, ok, err)
	}

	// Claims are not durable: the new process must claim again, and the
	// claim continues both the epoch and the seqs.
	if err := l.Append(ctx, batch(base, 1, 21, 21)); !errors.Is(err, ErrNotClaimed) {
		t.Fatalf("append after reopen without claim: %v, want ErrNotClaimed", err)
	}
	c, err := l.Claim(ctx, "r")
	if err != nil || c.Epoch != 2 || c.LastSeq != 20 {
		t.Fatalf("Claim after reopen = %+v, %v", c, err)
	}
	if err := l.Append(ctx, batch(base, 2, 20, 21)); !errors.Is(err, ErrSeqGap) {
		t.Fatalf("append overlapping the stored log: %v, want ErrSeqGap", err)
	}
	mustAppend(t, l, batch(base, 2, 21, 22))
	checkEntries(t, "after reopen+append", readAll(t, l, "r"), span(1, 22))
}

func TestNewRequiresDir(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without Dir succeeded")
	}
}

// The writers must answer ErrClosed once the log is closed. submit picks at
// random between enqueuing (the request channel is buffered and the
// committer has gone) and seeing l.stop, so about half the calls block
// forever on a request no goroutine will ever complete.
func TestWriteAfterCloseReturnsErrClosed(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	mustCreate(t, l, activeMeta("c"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func() error{
		"Append":    func() error { return l.Append(ctx, batch(activeMeta("c"), 1, 1, 1)) },
		"Create":    func() error { _, err := l.Create(ctx, activeMeta("d")); return err },
		"Claim":     func() error { _, err := l.Claim(ctx, "c"); return err },
		"Release":   func() error { return l.Release(ctx, "c", 1) },
		"Delete":    func() error { _, err := l.DeleteSession(ctx, "c", nil); return err },
		"MarkAlive": func() error { return l.MarkAlive(ctx, t0) },
	}
	for name, op := range ops {
		for i := 0; i < 16; i++ {
			res := make(chan error, 1)
			go func() { res <- op() }()
			select {
			case err := <-res:
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("%s after Close: %v, want ErrClosed", name, err)
				}
			case <-time.After(2 * time.Second):
				// Unblock the stuck caller (its request sits in l.reqs
				// and nothing reads it) so the goroutine does not leak.
				r := <-l.reqs
				r.err = ErrClosed
				close(r.done)
				<-res
				t.Fatalf("%s after Close blocked forever (call %d): the request was queued after the committer stopped", name, i+1)
			}
		}
	}
}

// Readers after Close must fail with an error; Pebble panics ("pebble:
// closed") when a closed DB is read, and the log passes that on.
func TestReadAfterCloseReturnsErrClosed(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeMeta("c"))
	mustAppend(t, l, batch(activeMeta("c"), 1, 1, 3))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		op   func() error
	}{
		{"Meta", func() error { _, err := l.Meta("c"); return err }},
		{"ReadAfter", func() error { _, err := l.ReadAfter("c", 0, 10); return err }},
		{"ReadBefore", func() error { _, err := l.ReadBefore("c", 0, 10); return err }},
		{"SendSeq", func() error { _, _, err := l.SendSeq("c", "x"); return err }},
		{"LastAlive", func() error { _, _, err := l.LastAlive(); return err }},
		{"ScanMeta", func() error {
			return l.ScanMeta(context.Background(), func(Meta) error { return nil }, nil)
		}},
		{"Sweep", func() error { _, err := l.Sweep(context.Background()); return err }},
	}
	for _, o := range ops {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s after Close panicked: %v", o.name, p)
				}
			}()
			if err := o.op(); !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", o.name, err)
			}
		}()
	}
}

// ---- 4. group commit ----

func TestGroupCommitConcurrentSessions(t *testing.T) {
	const sessions, perSession = 64, 20
	var cbRequests, cbEntries, cbCalls int64
	l := newTestLog(t, func(c *Config) {
		// OnCommit runs on the committer goroutine only.
		c.OnCommit = func(requests, entries int) {
			cbCalls++
			cbRequests += int64(requests)
			cbEntries += int64(entries)
		}
	})
	ctx := context.Background()
	start := make(chan struct{})
	errs := make(chan error, sessions)
	for i := 0; i < sessions; i++ {
		sid := fmt.Sprintf("g%02d", i)
		go func() {
			base := activeMeta(sid)
			if _, err := l.Create(ctx, base); err != nil {
				errs <- err
				return
			}
			<-start
			for s := uint64(1); s <= perSession; s++ {
				b := batch(base, 1, s, s)
				b.Sends = map[string]uint64{fmt.Sprint("send-", s): s}
				if err := l.Append(ctx, b); err != nil {
					errs <- fmt.Errorf("%s seq %d: %w", sid, s, err)
					return
				}
			}
			errs <- nil
		}()
	}
	close(start)
	for i := 0; i < sessions; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < sessions; i++ {
		sid := fmt.Sprintf("g%02d", i)
		checkEntries(t, sid, readAll(t, l, sid), span(1, perSession))
		if m := mustMeta(t, l, sid); m.LastSeq != perSession || m.Epoch != 1 {
			t.Fatalf("%s meta %+v", sid, m)
		}
		if seq, ok, err := l.SendSeq(sid, fmt.Sprint("send-", perSession)); !ok || err != nil || seq != perSession {
			t.Fatalf("%s SendSeq = %d, %v, %v", sid, seq, ok, err)
		}
	}
	st := l.Stats()
	total := uint64(sessions * (perSession + 1)) // creates + appends
	if st.Requests != total || st.Entries != sessions*perSession {
		t.Fatalf("stats %+v, want %d requests, %d entries", st, total, sessions*perSession)
	}
	if st.Syncs >= st.Requests {
		t.Fatalf("no group commit: %d syncs for %d requests", st.Syncs, st.Requests)
	}
	// Close so that reading the callback's counters is ordered after the
	// committer's last write to them.
	l.Close()
	if uint64(cbRequests) != st.Requests || uint64(cbEntries) != st.Entries || uint64(cbCalls) != st.Syncs {
		t.Fatalf("OnCommit saw %d calls, %d requests, %d entries; stats %+v", cbCalls, cbRequests, cbEntries, st)
	}
	t.Logf("group commit: %d requests in %d fsyncs (%.1f per fsync)", st.Requests, st.Syncs, float64(st.Requests)/float64(st.Syncs))
}

// MaxBatch 1 turns group commit off: one fsync per write request.
func TestMaxBatchOne(t *testing.T) {
	l := newTestLog(t, func(c *Config) { c.MaxBatch = 1 })
	ctx := context.Background()
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		sid := fmt.Sprint("mb", i)
		go func() {
			base := activeMeta(sid)
			_, err := l.Create(ctx, base)
			for s := uint64(1); s <= 5 && err == nil; s++ {
				err = l.Append(ctx, batch(base, 1, s, s))
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if st := l.Stats(); st.Syncs != st.Requests || st.Requests != 48 {
		t.Fatalf("stats %+v, want 48 requests in 48 fsyncs", st)
	}
	for i := 0; i < 8; i++ {
		checkEntries(t, "mb", readAll(t, l, fmt.Sprint("mb", i)), span(1, 5))
	}
}

// commitGroup is driven directly here to pin down what one group does
// with a mix of good and bad requests: each request is applied in order
// and sees the ones before it, a failing request leaves nothing of itself,
// and the rest share one fsync.
func TestCommitGroupMixed(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	mustCreate(t, l, activeMeta("x"))
	mustCreate(t, l, activeMeta("y"))
	mustAppend(t, l, batch(activeMeta("y"), 1, 1, 2))
	if err := l.Release(ctx, "y", 1); err != nil {
		t.Fatal(err)
	}
	before := l.Stats()

	bad := batch(activeMeta("x"), 1, 5, 5) // gap
	bad.Sends = map[string]uint64{"bad": 5}
	badMeta := bad.Meta
	badMeta.Status = StatusCompleted
	bad.Meta = badMeta
	reqs := []*request{
		{kind: reqAppend, sid: "x", batch: batch(activeMeta("x"), 1, 1, 2)},
		{kind: reqAppend, sid: "x", batch: bad},
		{kind: reqAppend, sid: "x", batch: batch(activeMeta("x"), 1, 3, 4)}, // sees 1..2 staged
		{kind: reqCreate, sid: "z", batch: Batch{Meta: activeMeta("z")}},
		{kind: reqAppend, sid: "z", batch: batch(activeMeta("z"), 1, 1, 1)}, // sees the staged claim
		{kind: reqCreate, sid: "z", batch: Batch{Meta: activeMeta("z")}},    // sees the staged meta
		{kind: reqClaim, sid: "x"},                                          // epoch 2, last seq 4
		{kind: reqAppend, sid: "x", batch: batch(activeMeta("x"), 1, 5, 5)}, // stale now
		{kind: reqAppend, sid: "x", batch: batch(activeMeta("x"), 2, 5, 5)},
		{kind: reqDelete, sid: "y"},
		{kind: reqClaim, sid: "y"}, // deleted earlier in the group
	}
	for _, r := range reqs {
		r.done = make(chan struct{})
	}
	l.commitGroup(reqs)

	wantErr := []error{nil, ErrSeqGap, nil, nil, nil, ErrExists, nil, ErrStaleEpoch, nil, nil, ErrNotFound}
	for i, r := range reqs {
		select {
		case <-r.done:
		default:
			t.Fatalf("request %d not completed", i)
		}
		if (wantErr[i] == nil) != (r.err == nil) || (wantErr[i] != nil && !errors.Is(r.err, wantErr[i])) {
			t.Fatalf("request %d: %v, want %v", i, r.err, wantErr[i])
		}
	}
	if reqs[6].meta.Epoch != 2 || reqs[6].meta.LastSeq != 4 {
		t.Fatalf("claim in group saw %+v", reqs[6].meta)
	}
	if !reqs[9].deleted {
		t.Fatal("delete in group did not delete")
	}
	after := l.Stats()
	if after.Syncs-before.Syncs != 1 || after.Requests-before.Requests != uint64(len(reqs)) ||
		after.Entries-before.Entries != 6 || after.Deleted-before.Deleted != 1 {
		t.Fatalf("stats delta: before %+v after %+v", before, after)
	}
	checkEntries(t, "x", readAll(t, l, "x"), span(1, 5))
	if m := mustMeta(t, l, "x"); m.Epoch != 2 || m.LastSeq != 5 || m.Status != StatusActive {
		t.Fatalf("x meta %+v", m)
	}
	if _, ok, _ := l.SendSeq("x", "bad"); ok {
		t.Fatal("the failed request's send id was stored")
	}
	checkEntries(t, "z", readAll(t, l, "z"), span(1, 1))
	if _, err := l.Meta("y"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("y: %v", err)
	}
	// The published claims are the ones the group ended with.
	mustAppend(t, l, batch(activeMeta("x"), 2, 6, 6))
	mustAppend(t, l, batch(activeMeta("z"), 1, 2, 2))
}

func TestCancelledContextBeforeQueue(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeMeta("k"))
	// submit may still queue a request whose context is already done (its
	// select has both cases ready); either way "nil" must mean stored and
	// an error must mean not stored.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	next := uint64(1)
	for i := 0; i < 20; i++ {
		err := l.Append(ctx, batch(activeMeta("k"), 1, next, next))
		switch {
		case err == nil:
			next++
		case errors.Is(err, context.Canceled):
		default:
			t.Fatal(err)
		}
	}
	checkEntries(t, "k", readAll(t, l, "k"), span(1, next-1))
}

// ---- 8. alive mark ----

func TestMarkAlive(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := New(Config{Dir: dir, SweepInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if tm, ok, err := l.LastAlive(); ok || err != nil || !tm.IsZero() {
		t.Fatalf("LastAlive on a new log = %v, %v, %v", tm, ok, err)
	}
	t1 := time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC)
	if err := l.MarkAlive(ctx, t1); err != nil {
		t.Fatal(err)
	}
	if tm, ok, err := l.LastAlive(); !ok || err != nil || !tm.Equal(t1) {
		t.Fatalf("LastAlive = %v, %v, %v; want %v", tm, ok, err, t1)
	}
	t2 := t1.Add(time.Minute)
	if err := l.MarkAlive(ctx, t2); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir)
	if tm, ok, err := l.LastAlive(); !ok || err != nil || !tm.Equal(t2) {
		t.Fatalf("LastAlive after reopen = %v, %v, %v; want %v", tm, ok, err, t2)
	}
	// The alive mark is not session metadata.
	n := 0
	if err := l.ScanMeta(ctx, func(Meta) error { n++; return nil }, func(err error) { t.Errorf("corrupt: %v", err) }); err != nil || n != 0 {
		t.Fatalf("ScanMeta saw %d sessions, err %v", n, err)
	}
}
