package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// ---- Create, Claim, Release, Append: the writer fence ----

func TestCreateAppendClaim(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	ctx := context.Background()
	base := activeHeader("s1")
	base.Sensitive = true
	base.State = []byte("actor state 0")
	base.Epoch, base.Owner, base.LastSeq = 42, "liar", 7 // set by the log, not the caller

	created, err := l.Create(ctx, base, []byte("ctx-0"))
	if err != nil {
		t.Fatal(err)
	}
	if created.Epoch != 1 || created.Owner != "node-a" || created.LastSeq != 0 || created.SessionID != "s1" || created.UserID != "u-s1" {
		t.Fatalf("Create returned %+v, want epoch 1, owner node-a, last seq 0", created)
	}
	h := mustHeader(t, l, "s1")
	if !reflect.DeepEqual(h, created) {
		t.Fatalf("stored header %+v, Create returned %+v", h, created)
	}
	if !h.Sensitive || string(h.State) != "actor state 0" || !h.CreatedAt.Equal(t0) || h.Status != StatusActive {
		t.Fatalf("stored header lost fields: %+v", h)
	}
	if d := mustLoad(t, l, "s1"); string(d.Context) != "ctx-0" || !reflect.DeepEqual(d.Header, h) {
		t.Fatalf("Load = %+v", d)
	}
	if es := mustRead(t, l, "s1", 1, h.LastSeq+1, 100, false); len(es) != 0 {
		t.Fatalf("new session has entries %v", seqs(es))
	}

	// Three batches: 1..3 (with two send ids), 4, 5..10. The caller's
	// header says epoch 99 and another owner: the log keeps its own.
	base.Epoch, base.Owner = 99, "mallory"
	b := batch(base, 1, 1, 3)
	b.Sends = []Send{{ID: "send-a", Seq: 1}, {ID: "send-b", Seq: 3}}
	b.Entries[1].Metadata = map[string]any{"tool": "search"}
	mustAppend(t, l, b)
	mustAppend(t, l, batch(base, 1, 4, 4))
	b = batch(base, 1, 5, 10)
	b.Header.State = []byte("actor state 10")
	mustAppend(t, l, b)

	h = mustHeader(t, l, "s1")
	if h.LastSeq != 10 || h.Epoch != 1 || h.Owner != "node-a" || string(h.State) != "actor state 10" || h.UserID != "u-s1" {
		t.Fatalf("header after appends: %+v", h)
	}
	all := readAll(t, l, "s1")
	checkEntries(t, "all", all, span(1, 10))
	if all[1].Metadata["tool"] != "search" {
		t.Fatalf("entry 2 metadata %v", all[1].Metadata)
	}
	for _, e := range all {
		if e.Epoch != 1 {
			t.Fatalf("entry %d has epoch %d, want the claim's 1", e.Seq, e.Epoch)
		}
	}

	// Release ends the claim; a new Claim (here by another node, after a
	// restart) bumps the epoch, records its owner, returns header and
	// context, and continues the seqs.
	mustRelease(t, l, "s1", 1)
	wantErr(t, "append after release", l.Append(ctx, batch(base, 1, 11, 11)), ErrNotClaimed)
	st := l.Stats()
	if st.Entries != 10 || st.Syncs == 0 || st.Requests < st.Syncs {
		t.Fatalf("stats %+v", st)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, func(c *Config) { c.NodeID = "node-b" })
	d := mustClaim(t, l, "s1")
	if d.Header.Epoch != 2 || d.Header.Owner != "node-b" || d.Header.LastSeq != 10 || string(d.Context) != "ctx-0" ||
		string(d.Header.State) != "actor state 10" {
		t.Fatalf("Claim = %+v, want epoch 2, owner node-b, last seq 10, context ctx-0", d)
	}
	if h := mustHeader(t, l, "s1"); !reflect.DeepEqual(h, d.Header) {
		t.Fatalf("stored header %+v after Claim returned %+v", h, d.Header)
	}
	b = batch(base, 2, 11, 11)
	b.Entries[0].Epoch = 77 // stamped by the log
	mustAppend(t, l, b)
	if h := mustHeader(t, l, "s1"); h.Epoch != 2 || h.Owner != "node-b" || h.LastSeq != 11 {
		t.Fatalf("header after claim+append: %+v", h)
	}
	es := readAll(t, l, "s1")
	if es[9].Epoch != 1 || es[10].Epoch != 2 {
		t.Fatalf("entry epochs 10: %d, 11: %d; want 1 and 2", es[9].Epoch, es[10].Epoch)
	}

	// An append without entries updates only the header.
	b = batch(base, 2, 12, 11)
	b.Header.Status = StatusInterrupted
	mustAppend(t, l, b)
	if h := mustHeader(t, l, "s1"); h.Status != StatusInterrupted || h.LastSeq != 11 || h.Epoch != 2 {
		t.Fatalf("header-only append: %+v", h)
	}
	checkEntries(t, "final", readAll(t, l, "s1"), span(1, 11))
}

func TestSixtyFourByteIDIsValid(t *testing.T) {
	l := newTestLog(t)
	sid := strings.Repeat("x", MaxIDLen)
	mustCreate(t, l, activeHeader(sid))
	mustAppend(t, l, batch(activeHeader(sid), 1, 1, 2))
	checkEntries(t, "64-byte id", readAll(t, l, sid), span(1, 2))
}

func TestFence(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	base := activeHeader("f")
	mustCreate(t, l, base)
	mustAppend(t, l, batch(base, 1, 1, 2))

	d := mustClaim(t, l, "f")
	if d.Header.Epoch != 2 || d.Header.LastSeq != 2 {
		t.Fatalf("Claim = %+v", d.Header)
	}
	wantErr(t, "append with epoch 1 after claim 2", l.Append(ctx, batch(base, 1, 3, 3)), ErrStaleEpoch)
	// The stale owner's Release must not drop the new owner's claim.
	mustRelease(t, l, "f", 1)
	mustAppend(t, l, batch(base, 2, 3, 3))
	// An epoch from the future is not the claim either.
	wantErr(t, "append with epoch 3 while claimed at 2", l.Append(ctx, batch(base, 3, 4, 4)), ErrStaleEpoch)
	// Claiming again from the same node still bumps the epoch.
	if d := mustClaim(t, l, "f"); d.Header.Epoch != 3 || d.Header.LastSeq != 3 {
		t.Fatalf("second Claim = %+v", d.Header)
	}
	wantErr(t, "append with epoch 2 after claim 3", l.Append(ctx, batch(base, 2, 4, 4)), ErrStaleEpoch)
	mustAppend(t, l, batch(base, 3, 4, 4))
	if h := mustHeader(t, l, "f"); h.Epoch != 3 || h.LastSeq != 4 || h.Owner != "node-a" {
		t.Fatalf("header %+v", h)
	}
	checkEntries(t, "after fence", readAll(t, l, "f"), span(1, 4))
}

func TestAppendErrors(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	base := activeHeader("a")
	mustCreate(t, l, base)
	b := batch(base, 1, 1, 5)
	b.Sends = []Send{{ID: "ok", Seq: 5}}
	b.Context = []byte("ctx-1")
	mustAppend(t, l, b)

	want := mustLoad(t, l, "a")
	wantEntries := readAll(t, l, "a")
	unchanged := func(what string) {
		t.Helper()
		if d := mustLoad(t, l, "a"); !reflect.DeepEqual(d, want) {
			t.Fatalf("%s changed the session:\n got %+v\nwant %+v", what, d, want)
		}
		if es := readAll(t, l, "a"); !reflect.DeepEqual(es, wantEntries) {
			t.Fatalf("%s changed the log: %v", what, seqs(es))
		}
		if _, ok, err := l.SendSeq("a", "bad"); ok || err != nil {
			t.Fatalf("%s stored its send id (ok=%v err=%v)", what, ok, err)
		}
	}
	// Every refused batch also carries a send id, a new context and a new
	// status: none of it may land.
	spoil := func(b Batch) Batch {
		b.Sends = []Send{{ID: "bad", Seq: 6}}
		b.Header.Status = StatusCompleted
		b.Context = []byte("ctx-bad")
		return b
	}
	cases := []struct {
		name string
		b    Batch
		is   error
	}{
		{"gap", spoil(batch(base, 1, 7, 8)), ErrSeqGap},
		{"repeat last", spoil(batch(base, 1, 5, 6)), ErrSeqGap},
		{"restart at 1", spoil(batch(base, 1, 1, 1)), ErrSeqGap},
		{"hole inside batch", func() Batch {
			b := spoil(batch(base, 1, 6, 8))
			b.Entries = append(b.Entries[:1], b.Entries[2:]...)
			return b
		}(), ErrSeqGap},
		{"seq 0", func() Batch {
			b := spoil(batch(base, 1, 6, 6))
			b.Entries[0].Seq = 0
			return b
		}(), ErrSeqGap},
		{"stale epoch", spoil(batch(base, 0, 6, 6)), ErrStaleEpoch},
		{"header last seq short", func() Batch {
			b := spoil(batch(base, 1, 6, 7))
			b.Header.LastSeq = 6
			return b
		}(), nil},
		{"header last seq ahead", func() Batch {
			b := spoil(batch(base, 1, 6, 7))
			b.Header.LastSeq = 8
			return b
		}(), nil},
		{"header-only append moving last seq", func() Batch {
			b := spoil(batch(base, 1, 6, 5))
			b.Header.LastSeq = 6
			return b
		}(), nil},
		{"header names other session", func() Batch {
			b := spoil(batch(base, 1, 6, 6))
			b.Header.SessionID = "other"
			return b
		}(), nil},
	}
	for _, c := range cases {
		// A failed append drops the claim (fail-stop), so every case
		// starts from a fresh one.
		d := mustClaim(t, l, "a")
		c.b.Epoch = d.Header.Epoch - 1 + c.b.Epoch // keep "stale" stale
		want.Header.Epoch = d.Header.Epoch
		err := l.Append(ctx, c.b)
		if err == nil {
			t.Fatalf("%s: append succeeded", c.name)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.is)
		}
		if !strings.Contains(err.Error(), `"a"`) {
			t.Fatalf("%s: error %q does not name the session", c.name, err)
		}
		unchanged(c.name)
	}

	// Not claimed: a session that was never created, and one released.
	wantErr(t, "append to unknown session", l.Append(ctx, batch(activeHeader("ghost"), 1, 1, 1)), ErrNotClaimed)
	if _, err := l.Header("ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed append created the session: %v", err)
	}
	d := mustClaim(t, l, "a")
	want.Header.Epoch = d.Header.Epoch
	mustRelease(t, l, "a", d.Header.Epoch)
	wantErr(t, "append after release", l.Append(ctx, spoil(batch(base, d.Header.Epoch, 6, 6))), ErrNotClaimed)
	unchanged("append after release")

	// Create and Claim errors.
	if _, err := l.Create(ctx, activeHeader("a"), []byte("x")); !errors.Is(err, ErrExists) {
		t.Fatalf("Create existing: %v, want ErrExists", err)
	}
	unchanged("Create existing")
	if _, err := l.Claim(ctx, "ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Claim unknown: %v, want ErrNotFound", err)
	}
	if _, err := l.Load("ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load unknown: %v, want ErrNotFound", err)
	}
	wantErr(t, "a failed Claim left a claim behind", l.Append(ctx, batch(activeHeader("ghost"), 1, 1, 1)), ErrNotClaimed)
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
			check("CheckID", CheckID(sid))
			_, err := l.Create(ctx, activeHeader(sid), nil)
			check("Create", err)
			_, err = l.Claim(ctx, sid)
			check("Claim", err)
			check("Append", l.Append(ctx, batch(activeHeader(sid), 1, 1, 1)))
			a := newAsync()
			check("AppendAsync", l.AppendAsync(ctx, ref(batch(activeHeader(sid), 1, 1, 1)), a.done))
			a.none(t, "AppendAsync with a bad id")
			_, err = l.Header(sid)
			check("Header", err)
			_, err = l.Load(sid)
			check("Load", err)
			_, err = l.Read(sid, 1, 10, 10, false)
			check("Read", err)
			_, _, err = l.SendSeq(sid, "x")
			check("SendSeq", err)
			check("ScanSends", l.ScanSends(sid, func(string, uint64) { t.Error("ScanSends called fn") }))
			_, err = l.DeleteSession(ctx, sid, nil)
			check("DeleteSession", err)
		})
	}
	if st := l.Stats(); st.Requests != 0 {
		t.Fatalf("bad ids reached the committer: %+v", st)
	}
}

// ---- the context blob ----

func TestContextWrittenOnlyWhenGiven(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()

	// Created without a context: none.
	mustCreate(t, l, activeHeader("none"))
	if d := mustLoad(t, l, "none"); d.Context != nil {
		t.Fatalf("session created without context has %q", d.Context)
	}
	mustAppend(t, l, batch(activeHeader("none"), 1, 1, 1))
	if d := mustLoad(t, l, "none"); d.Context != nil {
		t.Fatalf("append without context wrote %q", d.Context)
	}

	base := activeHeader("c")
	if _, err := l.Create(ctx, base, []byte("ctx-0")); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		ctx  []byte // Batch.Context
		want string // stored afterwards
	}{
		{nil, "ctx-0"},
		{[]byte("ctx-1"), "ctx-1"},
		{nil, "ctx-1"},
		{nil, "ctx-1"},
		{[]byte("ctx-2 is longer"), "ctx-2 is longer"},
		{[]byte("c3"), "c3"},
	}
	for i, s := range steps {
		seq := uint64(i + 1)
		b := batch(base, 1, seq, seq)
		b.Context = s.ctx
		mustAppend(t, l, b)
		d := mustLoad(t, l, "c")
		if string(d.Context) != s.want || d.Header.LastSeq != seq {
			t.Fatalf("step %d: Load = context %q, last seq %d; want %q, %d", i, d.Context, d.Header.LastSeq, s.want, seq)
		}
	}
	// A header-only append with a context changes the context alone.
	b := batch(base, 1, 7, 6)
	b.Context = []byte("ctx-4")
	mustAppend(t, l, b)
	mustRelease(t, l, "c", 1)
	d := mustClaim(t, l, "c")
	if string(d.Context) != "ctx-4" || d.Header.LastSeq != 6 || d.Header.Epoch != 2 {
		t.Fatalf("Claim = %+v, context %q", d.Header, d.Context)
	}
	checkEntries(t, "c", readAll(t, l, "c"), span(1, 6))
}

// The context is kept apart so that appends do not rewrite it: with a
// 60 KiB context, an append writes about as many bytes to Pebble's WAL as
// without one.
func TestAppendDoesNotRewriteContext(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	big := bytes.Repeat([]byte("c"), 60<<10)
	if _, err := l.Create(ctx, activeHeader("big"), big); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, l, activeHeader("small"))
	walBytes := func() uint64 { return l.db.Metrics().WAL.BytesIn }
	const n = 20
	cost := map[string]uint64{}
	for _, sid := range []string{"big", "small"} {
		before := walBytes()
		for s := uint64(1); s <= n; s++ {
			mustAppend(t, l, batch(activeHeader(sid), 1, s, s))
		}
		cost[sid] = (walBytes() - before) / n
	}
	t.Logf("WAL bytes per append: %v", cost)
	if cost["big"] > cost["small"]+1024 || cost["big"] > 4<<10 {
		t.Fatalf("an append to a session with a 60 KiB context writes %d bytes, without context %d: the context is rewritten",
			cost["big"], cost["small"])
	}
	if d := mustLoad(t, l, "big"); !bytes.Equal(d.Context, big) {
		t.Fatalf("context of %d bytes, want %d", len(d.Context), len(big))
	}
}

// ---- durability across reopen ----

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := New(Config{Dir: dir, NodeID: "node-a", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	base := activeHeader("r")
	base.State = []byte("state")
	if _, err := l.Create(ctx, base, []byte("context")); err != nil {
		t.Fatal(err)
	}
	for s := uint64(1); s <= 20; s += 4 {
		b := batch(base, 1, s, s+3)
		b.Sends = []Send{{ID: fmt.Sprintf("send-%d", s), Seq: s}}
		mustAppend(t, l, b)
	}
	mustCreate(t, l, activeHeader("other"))
	alive := t0.Add(42e9)
	if err := l.MarkAlive(ctx, alive); err != nil {
		t.Fatal(err)
	}
	before := mustLoad(t, l, "r")
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	l = openLog(t, dir, func(c *Config) { c.NodeID = "node-b" })
	after := mustLoad(t, l, "r")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("session changed across reopen:\n got %+v\nwant %+v", after, before)
	}
	if after.Header.LastSeq != 20 || after.Header.Epoch != 1 || string(after.Header.State) != "state" || string(after.Context) != "context" {
		t.Fatalf("after reopen %+v", after)
	}
	checkEntries(t, "after reopen", readAll(t, l, "r"), span(1, 20))
	for s := uint64(1); s <= 20; s += 4 {
		if seq, ok, err := l.SendSeq("r", fmt.Sprintf("send-%d", s)); !ok || err != nil || seq != s {
			t.Fatalf("SendSeq send-%d after reopen = %d, %v, %v", s, seq, ok, err)
		}
	}
	if h := mustHeader(t, l, "other"); h.Epoch != 1 || h.LastSeq != 0 {
		t.Fatalf("other %+v", h)
	}
	if got, ok, err := l.LastAlive(); err != nil || !ok || !got.Equal(alive) {
		t.Fatalf("LastAlive after reopen = %v, %v, %v", got, ok, err)
	}

	// Claims are not durable: the new process must claim again, and the
	// claim continues both the epoch and the seqs.
	wantErr(t, "append after reopen without claim", l.Append(ctx, batch(base, 1, 21, 21)), ErrNotClaimed)
	d := mustClaim(t, l, "r")
	if d.Header.Epoch != 2 || d.Header.LastSeq != 20 || d.Header.Owner != "node-b" {
		t.Fatalf("Claim after reopen = %+v", d.Header)
	}
	wantErr(t, "append overlapping the stored log", l.Append(ctx, batch(base, 2, 20, 21)), ErrSeqGap)
	d = mustClaim(t, l, "r") // the refused append dropped the claim
	mustAppend(t, l, batch(base, d.Header.Epoch, 21, 22))
	checkEntries(t, "after reopen+append", readAll(t, l, "r"), span(1, 22))
}
