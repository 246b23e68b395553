package wal

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/vmihailenco/msgpack/v5"
)

// wantCorrupt checks that err is a CorruptError for sid at seq.
func wantCorrupt(tb testing.TB, what string, err error, sid string, seq uint64) *CorruptError {
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
	return ce
}

var garbage = [][]byte{
	{0xc1},                         // never used in msgpack
	{0xff, 0xfe, 0xfd, 0x00, 0x01}, // negative fixints: not a map
	{0x81, 0xa2, 'i'},              // map cut short
	{0xdf, 0xff, 0xff, 0xff, 0xff}, // map claiming 4G pairs
	{},                             // empty value
	[]byte("not msgpack at all"),
}

func TestCorruptHeader(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	ctx := context.Background()
	for _, sid := range []string{"a", "b", "c", "d"} {
		mustCreate(t, l, activeHeader(sid))
		mustAppend(t, l, batch(activeHeader(sid), 1, 1, 2))
	}
	var mu sync.Mutex
	var told []*CorruptError
	onCorrupt := func(c *Config) {
		c.OnCorrupt = func(ce *CorruptError) { mu.Lock(); told = append(told, ce); mu.Unlock() }
	}

	for _, g := range garbage {
		l = rawEdit(t, l, dir, func(db *pebble.DB) { rawSet(t, db, headerKey("b"), g) }, onCorrupt)
		_, err := l.Header("b")
		ce := wantCorrupt(t, "Header", err, "b", 0)
		if ce.What != "header" {
			t.Fatalf("CorruptError.What = %q", ce.What)
		}
		_, err = l.Load("b")
		wantCorrupt(t, "Load", err, "b", 0)
		if st := l.Stats(); st.Corrupt != 2 {
			t.Fatalf("Stats.Corrupt = %d after two reads of a bad header", st.Corrupt)
		}
	}
	// A well-formed header naming another session is corrupt too.
	v, err := msgpack.Marshal(activeHeader("zz"))
	if err != nil {
		t.Fatal(err)
	}
	l = rawEdit(t, l, dir, func(db *pebble.DB) { rawSet(t, db, headerKey("c"), v) }, onCorrupt)
	_, err = l.Header("c")
	wantCorrupt(t, "Header naming another session", err, "c", 0)

	// The writer paths report it instead of overwriting it.
	if _, err := l.Create(ctx, activeHeader("b"), []byte("x")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Create over a corrupt header: %v", err)
	}
	_, err = l.Claim(ctx, "b")
	wantCorrupt(t, "Claim", err, "b", 0)
	wantErr(t, "append after a failed Claim", l.Append(ctx, batch(activeHeader("b"), 2, 3, 3)), ErrNotClaimed)

	// ScanHeaders skips both, reports them, counts them.
	mu.Lock()
	told = nil
	mu.Unlock()
	before := l.Stats().Corrupt
	var seen []string
	var bad []*CorruptError
	err = l.ScanHeaders(ctx, func(h Header) error { seen = append(seen, h.SessionID); return nil },
		func(ce *CorruptError) { bad = append(bad, ce) })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(seen, ",") != "a,d" {
		t.Fatalf("ScanHeaders saw %v, want a,d", seen)
	}
	if len(bad) != 2 || bad[0].SessionID != "b" || bad[1].SessionID != "c" || bad[0].What != "header" {
		t.Fatalf("onCorrupt got %v, want b and c", bad)
	}
	if n := l.Stats().Corrupt - before; n != 2 {
		t.Fatalf("ScanHeaders counted %d corrupt headers, want 2", n)
	}
	mu.Lock()
	if len(told) != 2 {
		t.Fatalf("Config.OnCorrupt told of %d records during the scan, want 2", len(told))
	}
	mu.Unlock()
	// A nil onCorrupt is allowed.
	n := 0
	if err := l.ScanHeaders(ctx, func(Header) error { n++; return nil }, nil); err != nil || n != 2 {
		t.Fatalf("ScanHeaders without onCorrupt: %d, %v", n, err)
	}
	// fn's error stops the scan and is returned.
	stop := errors.New("stop")
	n = 0
	if err := l.ScanHeaders(ctx, func(Header) error { n++; return stop }, nil); err != stop || n != 1 {
		t.Fatalf("ScanHeaders with failing fn: %d, %v", n, err)
	}
	// A done ctx stops it too.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.ScanHeaders(cctx, func(Header) error { t.Error("fn called"); return nil }, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("ScanHeaders with a done ctx: %v", err)
	}

	// The other sessions are untouched.
	checkEntries(t, "a", readAll(t, l, "a"), span(1, 2))
	checkEntries(t, "d", readAll(t, l, "d"), span(1, 2))
}

func TestCorruptAlive(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	l = rawEdit(t, l, dir, func(db *pebble.DB) { rawSet(t, db, keyAlive, []byte{1}) })
	if _, _, err := l.LastAlive(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LastAlive over garbage: %v", err)
	}
}

// Decoding must not allocate in proportion to a length a corrupt value
// merely claims: msgpack sizes its allocations from the declared length,
// so ~11 bytes could otherwise ask for gigabytes and kill the process.
func TestDecodeHugeLengthHeader(t *testing.T) {
	huge := []byte{0x00, 0x10, 0x00, 0x00} // 1<<20
	nested := []byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'm'}
	for range 20 {
		nested = append(nested, 0xde, 0xff, 0xff, 0xa0) // map16 of 65535, key ""
	}
	entryCase := func(b []byte) error { _, err := DecodeEntry(b); return err }
	headerCase := func(b []byte) error { _, err := DecodeHeader(b); return err }
	cases := []struct {
		name   string
		data   []byte
		decode func([]byte) error
	}{
		{"entry metadata map", append([]byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'm', 0xdf}, huge...), entryCase},
		{"entry metadata nested array", append([]byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'm', 0x81, 0xa1, 'k', 0xdd}, huge...), entryCase},
		{"entry metadata nested bin", append([]byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'm', 0x81, 0xa1, 'k', 0xc6, 0x01}, huge[1:]...), entryCase},
		{"entry metadata nested map16s", nested, entryCase},
		{"entry content str32", append([]byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'c', 0xdb}, huge...), entryCase},
		{"header map32", append([]byte{0xdf}, huge...), headerCase},
		{"header state bin32", append([]byte{0x82, 0xa2, 'i', 'd', 0xa1, 's', 0xa1, 'x', 0xc6}, huge...), headerCase},
		{"header state ext32", append([]byte{0x81, 0xa1, 'x', 0xc9}, append(huge, 0x01)...), headerCase},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := c.decode(c.data)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("decoding %x succeeded", c.data)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
				t.Fatalf("decoding %d bytes (%x) allocated %d MB before failing (%v)", len(c.data), c.data, n>>20, err)
			}
		})
	}
}

// Every header written by the log decodes, and DecodeHeader refuses
// trailing bytes (two values where one was written).
func TestDecodeHeaderStrict(t *testing.T) {
	h := activeHeader("s")
	h.State = []byte{0, 1, 2}
	v, err := msgpack.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHeader(v)
	if err != nil || got.SessionID != "s" || string(got.State) != string(h.State) || !got.CreatedAt.Equal(t0) {
		t.Fatalf("DecodeHeader = %+v, %v", got, err)
	}
	if _, err := DecodeHeader(append(v, 0x01)); err == nil {
		t.Fatal("DecodeHeader accepted trailing bytes")
	}
	if _, err := DecodeEntry(append(mustEncode(t, entry(1)), 0xc0)); err == nil {
		t.Fatal("DecodeEntry accepted trailing bytes")
	}
}

func mustEncode(tb testing.TB, e Entry) []byte {
	tb.Helper()
	b, err := EncodeEntry(e)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
