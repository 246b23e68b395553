package wal

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

func TestReadRanges(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeHeader("s"))
	mustAppend(t, l, batch(activeHeader("s"), 1, 1, 4))
	mustAppend(t, l, batch(activeHeader("s"), 1, 5, 10))
	cases := []struct {
		name      string
		lo, hi    uint64
		limit     int
		newest    bool
		want      []uint64
		standIns  []uint64 // of want, those past the log's end
		wantEmpty bool
	}{
		{name: "all", lo: 1, hi: 11, limit: 100, want: span(1, 10)},
		{name: "all, newest", lo: 1, hi: 11, limit: 100, newest: true, want: span(1, 10)},
		{name: "lo 0 is 1", lo: 0, hi: 11, limit: 100, want: span(1, 10)},
		{name: "middle", lo: 4, hi: 8, limit: 100, want: span(4, 7)},
		{name: "limit from the low end", lo: 1, hi: 11, limit: 3, want: span(1, 3)},
		{name: "limit from the newest end", lo: 1, hi: 11, limit: 3, newest: true, want: span(8, 10)},
		{name: "limit exactly the range", lo: 1, hi: 11, limit: 10, newest: true, want: span(1, 10)},
		{name: "middle, newest 2", lo: 3, hi: 9, limit: 2, newest: true, want: span(7, 8)},
		{name: "middle, oldest 2", lo: 3, hi: 9, limit: 2, want: span(3, 4)},
		{name: "lo 0, newest 1 of 1", lo: 0, hi: 2, limit: 5, newest: true, want: span(1, 1)},
		{name: "one", lo: 10, hi: 11, limit: 5, want: span(10, 10)},
		{name: "empty range", lo: 5, hi: 5, limit: 5, wantEmpty: true},
		{name: "inverted range", lo: 6, hi: 5, limit: 5, wantEmpty: true},
		{name: "hi 1", lo: 0, hi: 1, limit: 5, wantEmpty: true},
		{name: "limit 0", lo: 1, hi: 11, limit: 0, wantEmpty: true},
		{name: "limit -1", lo: 1, hi: 11, limit: -1, newest: true, wantEmpty: true},
		{name: "past the end", lo: 11, hi: 11, limit: 5, wantEmpty: true},
		{name: "max lo", lo: math.MaxUint64, hi: math.MaxUint64, limit: 5, wantEmpty: true},
		// The caller bounds hi; past the log's end Read says what it cannot
		// find instead of silently returning less.
		{name: "hi past the end", lo: 9, hi: 13, limit: 100, want: span(9, 12), standIns: []uint64{11, 12}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			es := mustRead(t, l, "s", c.lo, c.hi, c.limit, c.newest)
			if c.wantEmpty {
				if len(es) != 0 {
					t.Fatalf("got %v, want nothing", seqs(es))
				}
				return
			}
			if !reflect.DeepEqual(seqs(es), c.want) {
				t.Fatalf("got %v, want %v", seqs(es), c.want)
			}
			for _, e := range es {
				if e.Seq > 10 {
					if !isUnreadable(e) {
						t.Fatalf("seq %d past the end: %+v, want a stand-in", e.Seq, e)
					}
					continue
				}
				checkEntries(t, c.name, []Entry{e}, []uint64{e.Seq})
			}
		})
	}
}

// A session that was never created has no entries; Read does not look at
// headers, so the caller (who bounds hi by the header) is the one who knows.
func TestReadUnknownSession(t *testing.T) {
	l := newTestLog(t)
	if es := mustRead(t, l, "nope", 1, 1, 10, false); len(es) != 0 {
		t.Fatalf("Read(nope, 1, 1) = %v", seqs(es))
	}
	// Keys of a session whose id extends another's are not its entries.
	for _, sid := range []string{"ab", "abc", "abd"} {
		mustCreate(t, l, activeHeader(sid))
	}
	mustAppend(t, l, batch(activeHeader("abc"), 1, 1, 3))
	mustAppend(t, l, batch(activeHeader("abd"), 1, 1, 1))
	checkEntries(t, "abc", readAll(t, l, "abc"), span(1, 3))
	checkEntries(t, "abd", readAll(t, l, "abd"), span(1, 1))
	if es := readAll(t, l, "ab"); len(es) != 0 {
		t.Fatalf("ab sees %v", seqs(es))
	}
}

// corruptLog is a session "c" of 10 entries with entry 5 missing, 7
// garbage, 8 a good entry stored under the wrong seq and 9 an entry
// without seq, reopened with OnCorrupt recording what it is told.
func corruptLog(t *testing.T, first, last bool) (*Log, *[]*CorruptError, *sync.Mutex) {
	dir := t.TempDir()
	l := openLog(t, dir)
	mustCreate(t, l, activeHeader("c"))
	mustAppend(t, l, batch(activeHeader("c"), 1, 1, 10))
	var mu sync.Mutex
	var told []*CorruptError
	l = rawEdit(t, l, dir, func(db *pebble.DB) {
		rawDelete(t, db, entryKey("c", 5))
		rawSet(t, db, entryKey("c", 7), []byte{0xc1, 0x00})
		v, err := EncodeEntry(entry(3))
		if err != nil {
			t.Fatal(err)
		}
		rawSet(t, db, entryKey("c", 8), v)
		v, err = EncodeEntry(Entry{Role: "user", Content: "no seq"})
		if err != nil {
			t.Fatal(err)
		}
		rawSet(t, db, entryKey("c", 9), v)
		if first {
			rawDelete(t, db, entryKey("c", 1))
		}
		if last {
			rawDelete(t, db, entryKey("c", 10))
		}
	}, func(c *Config) {
		c.OnCorrupt = func(ce *CorruptError) {
			mu.Lock()
			told = append(told, ce)
			mu.Unlock()
		}
	})
	return l, &told, &mu
}

func TestReadStandsInForBadEntries(t *testing.T) {
	l, told, mu := corruptLog(t, false, false)
	bad := map[uint64]bool{5: true, 7: true, 8: true, 9: true}
	check := func(what string, es []Entry, want []uint64) {
		t.Helper()
		if !reflect.DeepEqual(seqs(es), want) {
			t.Fatalf("%s: seqs %v, want %v", what, seqs(es), want)
		}
		for _, e := range es {
			if bad[e.Seq] {
				if !isUnreadable(e) || e.Content == "" {
					t.Fatalf("%s: entry %d = %+v, want a stand-in", what, e.Seq, e)
				}
				continue
			}
			checkEntries(t, what, []Entry{e}, []uint64{e.Seq})
		}
	}
	before := l.Stats().Corrupt
	check("all", mustRead(t, l, "c", 1, 11, 100, false), span(1, 10))
	if n := l.Stats().Corrupt - before; n != 4 {
		t.Fatalf("Stats.Corrupt grew by %d for 4 bad entries", n)
	}
	mu.Lock()
	var got []uint64
	for _, ce := range *told {
		if ce.SessionID != "c" || ce.What != "entry" || !errors.Is(ce, ErrCorrupt) || ce.Err == nil {
			t.Fatalf("OnCorrupt told %+v", ce)
		}
		got = append(got, ce.Seq)
	}
	mu.Unlock()
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if !reflect.DeepEqual(got, []uint64{5, 7, 8, 9}) {
		t.Fatalf("OnCorrupt told of seqs %v, want 5 7 8 9", got)
	}

	// Reads that start, end or consist of a bad entry.
	check("start at the hole", mustRead(t, l, "c", 5, 11, 100, false), span(5, 10))
	check("only the hole", mustRead(t, l, "c", 5, 6, 100, false), span(5, 5))
	check("newest 3", mustRead(t, l, "c", 1, 11, 3, true), span(8, 10))
	check("oldest 5", mustRead(t, l, "c", 1, 11, 5, false), span(1, 5))
	check("around", mustRead(t, l, "c", 4, 9, 100, true), span(4, 8))
	// Reads that do not touch them count nothing.
	before = l.Stats().Corrupt
	check("before the hole", mustRead(t, l, "c", 1, 5, 100, false), span(1, 4))
	check("newest 1", mustRead(t, l, "c", 1, 11, 1, true), span(10, 10))
	if n := l.Stats().Corrupt - before; n != 0 {
		t.Fatalf("clean reads counted %d corrupt records", n)
	}

	// The header is untouched and appends go on after a Claim.
	if h := mustHeader(t, l, "c"); h.LastSeq != 10 {
		t.Fatalf("header %+v", h)
	}
	mustClaim(t, l, "c")
	mustAppend(t, l, batch(activeHeader("c"), 2, 11, 11))
	check("after append", mustRead(t, l, "c", 9, 12, 100, false), span(9, 11))
}

// The first and the newest entry missing: edges are holes too, not a
// silently shorter answer.
func TestReadHolesAtEdges(t *testing.T) {
	l, _, _ := corruptLog(t, true, true)
	es := mustRead(t, l, "c", 1, 11, 50, true)
	if len(es) != 10 || !isUnreadable(es[0]) || !isUnreadable(es[9]) || isUnreadable(es[1]) || es[1].Seq != 2 {
		t.Fatalf("Read newest 50 = %+v", es)
	}
	es = mustRead(t, l, "c", 10, 11, 50, false)
	if len(es) != 1 || !isUnreadable(es[0]) || es[0].Seq != 10 {
		t.Fatalf("Read(10, 11) = %+v", es)
	}
}

// Read never looks at the header: a session whose header is unreadable can
// still be read by range.
func TestReadWithCorruptHeader(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	mustCreate(t, l, activeHeader("h"))
	mustAppend(t, l, batch(activeHeader("h"), 1, 1, 5))
	l = rawEdit(t, l, dir, func(db *pebble.DB) { rawSet(t, db, headerKey("h"), []byte("garbage")) })
	if _, err := l.Header("h"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Header over garbage: %v", err)
	}
	before := l.Stats().Corrupt
	checkEntries(t, "h", mustRead(t, l, "h", 1, 6, 100, false), span(1, 5))
	checkEntries(t, "h newest", mustRead(t, l, "h", 1, 6, 2, true), span(4, 5))
	if n := l.Stats().Corrupt - before; n != 0 {
		t.Fatalf("Read counted %d corrupt records: it looked at the header", n)
	}
}

// ---- send ids ----

func TestSendSeqAndScanSends(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	ctx := context.Background()
	for _, sid := range []string{"s", "s2", "t"} {
		mustCreate(t, l, activeHeader(sid))
	}
	b := batch(activeHeader("s"), 1, 1, 3)
	b.Sends = []Send{{ID: "send-a", Seq: 1}, {ID: "send-b", Seq: 3}, {ID: "", Seq: 2}, {ID: "with\x00nul", Seq: 3}}
	mustAppend(t, l, b)
	b = batch(activeHeader("s2"), 1, 1, 1)
	b.Sends = []Send{{ID: "other", Seq: 1}}
	mustAppend(t, l, b)
	// A later append may name the same id again (a retried send answered
	// by a new entry): the newest wins.
	b = batch(activeHeader("s"), 1, 4, 4)
	b.Sends = []Send{{ID: "send-a", Seq: 4}}
	mustAppend(t, l, b)

	want := map[string]uint64{"send-a": 4, "send-b": 3, "": 2, "with\x00nul": 3}
	for id, seq := range want {
		got, ok, err := l.SendSeq("s", id)
		if err != nil || !ok || got != seq {
			t.Fatalf("SendSeq(s, %q) = %d, %v, %v; want %d", id, got, ok, err, seq)
		}
	}
	for _, c := range [][2]string{{"s", "unknown"}, {"s", "other"}, {"nope", "send-a"}, {"t", "send-a"}} {
		seq, ok, err := l.SendSeq(c[0], c[1])
		if seq != 0 || ok || err != nil {
			t.Fatalf("SendSeq(%q, %q) = %d, %v, %v; want 0, false, nil", c[0], c[1], seq, ok, err)
		}
	}
	scan := func(sid string) map[string]uint64 {
		t.Helper()
		got := map[string]uint64{}
		if err := l.ScanSends(sid, func(id string, seq uint64) { got[id] = seq }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := scan("s"); !reflect.DeepEqual(got, want) {
		t.Fatalf("ScanSends(s) = %v, want %v", got, want)
	}
	if got := scan("s2"); !reflect.DeepEqual(got, map[string]uint64{"other": 1}) {
		t.Fatalf("ScanSends(s2) = %v", got)
	}
	if got := scan("t"); len(got) != 0 {
		t.Fatalf("ScanSends(t) = %v", got)
	}

	// A send id whose value is not 8 bytes is corrupt: SendSeq says so,
	// ScanSends skips it.
	l = rawEdit(t, l, dir, func(db *pebble.DB) { rawSet(t, db, sendKey("s", "broken"), []byte{1, 2, 3}) })
	_, _, err := l.SendSeq("s", "broken")
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.SessionID != "s" {
		t.Fatalf("SendSeq over garbage: %v", err)
	}
	if got := scan("s"); !reflect.DeepEqual(got, want) {
		t.Fatalf("ScanSends(s) with a broken id = %v, want %v", got, want)
	}
	// Send ids survive the reopen and go with the session.
	mustClaim(t, l, "s")
	mustRelease(t, l, "s", 2)
	if ok, err := l.DeleteSession(ctx, "s", nil); !ok || err != nil {
		t.Fatalf("DeleteSession = %v, %v", ok, err)
	}
	if got := scan("s"); len(got) != 0 {
		t.Fatalf("ScanSends after delete = %v", got)
	}
	if got := scan("s2"); len(got) != 1 {
		t.Fatalf("ScanSends(s2) after deleting s = %v", got)
	}
}
