package wal

import (
	"runtime"
	"testing"
)

func FuzzDecodeEntry(f *testing.F) {
	seeds := []Entry{
		{Seq: 1, Role: "user", Content: "hello"},
		{Seq: 2, Role: "assistant", Content: "Hi! How can I help?", Time: 1.7e9 + 0.25},
		{Seq: 3, Role: "tool", Content: "", Time: -1, Metadata: map[string]any{"call_id": "c1", "status": "started", "n": 3, "args": map[string]any{"q": []any{"a", 1.5, true, nil}}}},
		{Seq: 1<<64 - 1, Role: "\x00\xff", Content: string(make([]byte, 300))},
	}
	for _, e := range seeds {
		b, err := EncodeEntry(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{0xc1})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	// A length header far beyond the input.
	f.Add([]byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'c', 0xdb, 0x7f, 0xff, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEntry(data)
		if err != nil {
			if e.Seq != 0 || e.Role != "" || e.Content != "" || e.Metadata != nil {
				t.Fatalf("failed decode returned a non-zero entry %+v", e)
			}
			return
		}
		if e.Seq == 0 {
			t.Fatalf("decoded an entry without seq: %+v", e)
		}
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatalf("re-encoding decoded entry %+v: %v", e, err)
		}
		e2, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("decoding re-encoded entry %+v (%x): %v", e, b, err)
		}
		if e2.Seq != e.Seq || e2.Role != e.Role || e2.Content != e.Content {
			t.Fatalf("round trip changed the entry: %+v -> %+v", e, e2)
		}
		if e2.Time != e.Time && !(e.Time != e.Time && e2.Time != e2.Time) { // NaN stays NaN
			t.Fatalf("round trip changed the time: %v -> %v", e.Time, e2.Time)
		}
	})
}

// Decoding must not allocate in proportion to a length a corrupt value
// merely claims. msgpack (v5.4.1) sizes the allocation from the declared
// length, uncapped, in DecodeMap (every map[string]any: Entry.Metadata,
// Meta.Context/AgentContext, ToolCall.Args), in its []any decoder, and for
// bin values inside an any. With n = 1<<20 below, ~11 bytes of input
// allocate 16-80 MB; with n = 0x7fffffff (map32 header df 7f ff ff ff),
// DecodeEntry ends in "fatal error: out of memory", which kills the process
// (no recover, no onCorrupt). A plain cap is not enough: nested map16
// headers (65535 pairs each, 4 bytes per level) multiply.
func TestDecodeHugeLengthHeader(t *testing.T) {
	huge := []byte{0x00, 0x10, 0x00, 0x00} // 1<<20
	nested := []byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'm'}
	for range 20 {
		nested = append(nested, 0xde, 0xff, 0xff, 0xa0) // map16 of 65535, key ""
	}
	entryCase := func(b []byte) error { _, err := DecodeEntry(b); return err }
	metaCase := func(b []byte) error { _, err := decodeMeta("s", b); return err }
	cases := []struct {
		name   string
		data   []byte
		decode func([]byte) error
	}{
		{"entry metadata map", append([]byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'm', 0xdf}, huge...), entryCase},
		{"entry metadata nested array", append([]byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'm', 0x81, 0xa1, 'k', 0xdd}, huge...), entryCase},
		{"entry metadata nested bin", append([]byte{0x82, 0xa1, 'q', 0x01, 0xa1, 'm', 0x81, 0xa1, 'k', 0xc6, 0x01}, huge[1:]...), entryCase},
		{"entry metadata nested map16s", nested, entryCase},
		{"meta context map", append([]byte{0x82, 0xa2, 'i', 'd', 0xa1, 's', 0xa2, 'c', 'x', 0xdf}, huge...), metaCase},
		{"meta pending tool args", append([]byte{0x82, 0xa2, 'i', 'd', 0xa1, 's', 0xa2, 'p', 't', 0x81, 0xa1, 'a', 0xdf}, huge...), metaCase},
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
				t.Fatalf("decoding %d bytes (%x) allocated %d MB before failing (%v); a length header of 0x7fffffff makes it a fatal out-of-memory",
					len(c.data), c.data, n>>20, err)
			}
		})
	}
}
