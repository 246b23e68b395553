package wal

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// wantCorrupt checks that err is a CorruptError for sid at seq.
func wantCorrupt(tb testing.TB, what string, err error, sid string, seq uint64) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("%s: no error, want corruption of %q seq %d", what, sid, seq)
	}
	if !errors.Is(err, ErrCorrupt) {
		tb.Fatalf("%s: %v is not ErrCorrupt", what, err)
	}
	var ce *CorruptError
	if !errors.As(err, &ce) {
		tb.Fatalf("%s: %v is not a *CorruptError", what, err)
	}
	if ce.SessionID != sid || ce.Seq != seq {
		tb.Fatalf("%s: CorruptError names %q seq %d, want %q seq %d (%v)", what, ce.SessionID, ce.Seq, sid, seq, err)
	}
	if !strings.Contains(err.Error(), sid) {
		tb.Fatalf("%s: message %q does not name the session", what, err)
	}
}

func rawSet(tb testing.TB, l *Log, key, val []byte) {
	tb.Helper()
	if err := l.db.Set(key, val, pebble.Sync); err != nil {
		tb.Fatal(err)
	}
}

func rawDelete(tb testing.TB, l *Log, key []byte) {
	tb.Helper()
	if err := l.db.Delete(key, pebble.Sync); err != nil {
		tb.Fatal(err)
	}
}

var garbage = [][]byte{
	{0xc1},                         // never used in msgpack
	{0xff, 0xfe, 0xfd, 0x00, 0x01}, // negative fixints: not a map
	{0x81, 0xa1, 'q'},              // map cut short
	{0xdf, 0xff, 0xff, 0xff, 0xff}, // map claiming 4G pairs
	{},                             // empty value
	[]byte("not msgpack at all"),
}

// ---- 7. corruption ----

func TestCorruptEntry(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeMeta("c"))
	mustAppend(t, l, batch(activeMeta("c"), 1, 1, 10))

	for i, g := range garbage {
		rawSet(t, l, entryKey("c", 4), g)
		_, err := l.ReadAfter("c", 0, 100)
		wantCorrupt(t, "ReadAfter over garbage", err, "c", 4)
		_, err = l.ReadAfter("c", 3, 1)
		wantCorrupt(t, "ReadAfter at garbage", err, "c", 4)
		_, err = l.ReadBefore("c", 0, 100)
		wantCorrupt(t, "ReadBefore over garbage", err, "c", 4)
		_, err = l.ReadBefore("c", 5, 1)
		wantCorrupt(t, "ReadBefore at garbage", err, "c", 4)
		if i == 0 {
			// Reads that do not touch the bad entry still work.
			es, err := l.ReadAfter("c", 4, 100)
			if err != nil {
				t.Fatal(err)
			}
			checkEntries(t, "after the bad entry", es, span(5, 10))
			es, err = l.ReadBefore("c", 4, 100)
			if err != nil {
				t.Fatal(err)
			}
			checkEntries(t, "before the bad entry", es, span(1, 3))
			es, err = l.ReadBefore("c", 0, 3)
			if err != nil {
				t.Fatal(err)
			}
			checkEntries(t, "newest 3", es, span(8, 10))
		}
	}

	// A well-formed entry stored under the wrong seq.
	v, err := EncodeEntry(entry(7))
	if err != nil {
		t.Fatal(err)
	}
	rawSet(t, l, entryKey("c", 4), v)
	_, err = l.ReadAfter("c", 0, 100)
	wantCorrupt(t, "entry under wrong seq", err, "c", 4)

	// A well-formed entry without a seq.
	v, err = EncodeEntry(Entry{Role: "user", Content: "x"})
	if err != nil {
		t.Fatal(err)
	}
	rawSet(t, l, entryKey("c", 4), v)
	_, err = l.ReadBefore("c", 0, 100)
	wantCorrupt(t, "entry without seq", err, "c", 4)

	// The session's metadata is still readable and appends still work.
	if m := mustMeta(t, l, "c"); m.LastSeq != 10 {
		t.Fatalf("meta %+v", m)
	}
	mustAppend(t, l, batch(activeMeta("c"), 1, 11, 11))
}

func TestCorruptMeta(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	for _, sid := range []string{"a", "b", "c", "d"} {
		mustCreate(t, l, activeMeta(sid))
		mustAppend(t, l, batch(activeMeta(sid), 1, 1, 2))
	}

	for _, g := range garbage {
		rawSet(t, l, metaKey("b"), g)
		_, err := l.Meta("b")
		wantCorrupt(t, "Meta", err, "b", 0)
	}
	// Well-formed metadata naming another session is corrupt too.
	v, err := encode(activeMeta("zz"))
	if err != nil {
		t.Fatal(err)
	}
	rawSet(t, l, metaKey("c"), v)
	_, err = l.Meta("c")
	wantCorrupt(t, "Meta naming another session", err, "c", 0)

	// The writer paths report it instead of overwriting it.
	if _, err := l.Create(ctx, activeMeta("b")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Create over corrupt meta: %v", err)
	}
	_, err = l.Claim(ctx, "b")
	wantCorrupt(t, "Claim", err, "b", 0)

	// ScanMeta skips both and reports them.
	var seen []string
	var bad []error
	err = l.ScanMeta(ctx, func(m Meta) error { seen = append(seen, m.SessionID); return nil }, func(err error) { bad = append(bad, err) })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(seen, ",") != "a,d" {
		t.Fatalf("ScanMeta saw %v, want a,d", seen)
	}
	if len(bad) != 2 {
		t.Fatalf("onCorrupt got %v, want 2 errors", bad)
	}
	wantCorrupt(t, "onCorrupt 1", bad[0], "b", 0)
	wantCorrupt(t, "onCorrupt 2", bad[1], "c", 0)
	// A nil onCorrupt is allowed.
	n := 0
	if err := l.ScanMeta(ctx, func(Meta) error { n++; return nil }, nil); err != nil || n != 2 {
		t.Fatalf("ScanMeta without onCorrupt: %d, %v", n, err)
	}
	// fn's error stops the scan and is returned.
	stop := errors.New("stop")
	n = 0
	if err := l.ScanMeta(ctx, func(Meta) error { n++; return stop }, nil); err != stop || n != 1 {
		t.Fatalf("ScanMeta with failing fn: %d, %v", n, err)
	}

	// A sweep skips them and does not fail.
	if _, err := l.Sweep(ctx); err != nil {
		t.Fatalf("Sweep over corrupt metadata: %v", err)
	}

	// An operator can still delete a session whose metadata is corrupt,
	// once nobody claims it; cond is not consulted then.
	if ok, err := l.DeleteSession(ctx, "b", nil); ok || err != nil {
		t.Fatalf("delete of a claimed corrupt session = %v, %v", ok, err)
	}
	if err := l.Release(ctx, "b", 1); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.DeleteSession(ctx, "b", func(Meta) bool { return false }); !ok || err != nil {
		t.Fatalf("delete of corrupt session = %v, %v", ok, err)
	}
	checkGone(t, l, "b")
	checkEntries(t, "a", readAll(t, l, "a"), span(1, 2))
	checkEntries(t, "d", readAll(t, l, "d"), span(1, 2))
}

func TestCorruptSendAndAlive(t *testing.T) {
	l := newTestLog(t)
	rawSet(t, l, sendKey("s", "x"), []byte{1, 2, 3})
	_, _, err := l.SendSeq("s", "x")
	wantCorrupt(t, "SendSeq", err, "s", 0)

	rawSet(t, l, keyAlive, []byte{1})
	if _, _, err := l.LastAlive(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LastAlive over garbage: %v", err)
	}
}

func TestHoleInTheMiddle(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeMeta("h"))
	mustAppend(t, l, batch(activeMeta("h"), 1, 1, 10))
	rawDelete(t, l, entryKey("h", 5))

	_, err := l.ReadAfter("h", 0, 100)
	wantCorrupt(t, "ReadAfter across hole", err, "h", 5)
	_, err = l.ReadAfter("h", 2, 5)
	wantCorrupt(t, "ReadAfter across hole, limited", err, "h", 5)
	_, err = l.ReadBefore("h", 0, 100)
	wantCorrupt(t, "ReadBefore across hole", err, "h", 5)
	_, err = l.ReadBefore("h", 9, 6)
	wantCorrupt(t, "ReadBefore across hole, limited", err, "h", 5)

	// Reads that stop short of it are fine.
	es, err := l.ReadAfter("h", 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "before the hole", es, span(1, 4))
	es, err = l.ReadBefore("h", 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "newest 5", es, span(6, 10))
}

// A read whose range starts (or ends) at a missing entry skips it
// silently: the hole check only compares consecutive returned entries, so
// a client resuming after seq 4 gets 6, 7, ... with no error and never
// learns that 5 is gone.
func TestHoleAtEdgeOfRead(t *testing.T) {
	setup := func(t *testing.T, missing uint64) *Log {
		l := newTestLog(t)
		mustCreate(t, l, activeMeta("h"))
		mustAppend(t, l, batch(activeMeta("h"), 1, 1, 10))
		rawDelete(t, l, entryKey("h", missing))
		return l
	}
	t.Run("ReadAfter starting at the hole", func(t *testing.T) {
		l := setup(t, 5)
		es, err := l.ReadAfter("h", 4, 100)
		if err == nil {
			t.Fatalf("ReadAfter(h, 4) = %v with no error; entry 5 is missing", seqs(es))
		}
		wantCorrupt(t, "ReadAfter(h, 4)", err, "h", 5)
	})
	t.Run("ReadBefore ending at a missing first entry", func(t *testing.T) {
		l := setup(t, 1)
		es, err := l.ReadBefore("h", 0, 50)
		if err == nil {
			t.Fatalf("ReadBefore(h, 0, 50) = %v with no error; entry 1 is missing", seqs(es))
		}
		wantCorrupt(t, "ReadBefore(h, 0, 50)", err, "h", 1)
	})
	t.Run("ReadBefore starting at the hole", func(t *testing.T) {
		l := setup(t, 7)
		es, err := l.ReadBefore("h", 8, 3)
		if err == nil {
			t.Fatalf("ReadBefore(h, 8, 3) = %v with no error; entry 7 is missing", seqs(es))
		}
		wantCorrupt(t, "ReadBefore(h, 8, 3)", err, "h", 7)
	})
	t.Run("newest entry missing", func(t *testing.T) {
		l := setup(t, 10) // metadata still says LastSeq 10
		es, err := l.ReadAfter("h", 5, 100)
		if err == nil {
			t.Fatalf("ReadAfter(h, 5) = %v with no error; metadata says last seq 10", seqs(es))
		}
		wantCorrupt(t, "ReadAfter(h, 5)", err, "h", 10)
	})
}

// ReadAfter computes after+1, which wraps to 0 for the largest seq: a
// client claiming to have seen everything is sent the whole log.
func TestReadAfterMaxSeq(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeMeta("m"))
	mustAppend(t, l, batch(activeMeta("m"), 1, 1, 3))
	es, err := l.ReadAfter("m", math.MaxUint64, 100)
	if err != nil || len(es) != 0 {
		t.Fatalf("ReadAfter(m, MaxUint64) = %v, %v; want nothing", seqs(es), err)
	}
}
