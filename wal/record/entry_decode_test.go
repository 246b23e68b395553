package record

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestFastDecoderReadsWhatTheLogWrites: every entry shape the log writes
// takes the fast path, and it gives what msgpack's decoder gives.
func TestFastDecoderReadsWhatTheLogWrites(t *testing.T) {
	for _, e := range fuzzEntrySeeds() {
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		fast, err := decodeEntryFast(b)
		if err != nil {
			t.Fatalf("entry %d: %v", e.Seq, err)
		}
		var slow Entry
		if err := msgpack.Unmarshal(b, &slow); err != nil {
			t.Fatal(err)
		}
		if fast.Seq != slow.Seq || fast.Role != slow.Role || fast.Content != slow.Content || fast.Epoch != slow.Epoch || fast.Time != slow.Time {
			t.Fatalf("fast %+v, slow %+v", fast, slow)
		}
		if fs, ss := withoutNaN(fast.Metadata), withoutNaN(slow.Metadata); !reflect.DeepEqual(fs, ss) {
			t.Fatalf("metadata: fast %#v, slow %#v", fs, ss)
		}
	}
}

// TestMetadataKeysAreWrittenInOrder: the log writes every map of an
// entry's metadata with its keys sorted (a replay relies on it to write
// JSON in one pass), whatever order Go's map iteration gives.
func TestMetadataKeysAreWrittenInOrder(t *testing.T) {
	md := map[string]any{"tool": map[string]any{"z": 1, "name": "search", "args": map[string]any{"q": "x", "b": 2, "k": []any{map[string]any{"y": 1, "x": 2}}}}, "id": "m1", "reply_to": 3, "a": nil}
	for range 20 {
		b, err := EncodeEntry(Entry{Seq: 1, Role: "user", Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		v, err := ViewEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		checkSorted(t, v.Meta)
	}
}

// checkSorted fails unless every map in the msgpack item at the start of
// b has its keys in ascending order; it returns what follows the item.
func checkSorted(t *testing.T, b []byte) []byte {
	t.Helper()
	tok, b, err := ReadToken(b)
	if err != nil {
		t.Fatal(err)
	}
	switch tok.Kind {
	case KindArray:
		for range tok.N {
			b = checkSorted(t, b)
		}
	case KindMap:
		var prev string
		for i := range tok.N {
			k, rest, err := ReadToken(b)
			if err != nil || k.Kind != KindString {
				t.Fatalf("key %d: %v", i, err)
			}
			if i > 0 && string(k.Str) <= prev {
				t.Fatalf("key %q after %q", k.Str, prev)
			}
			prev = string(k.Str)
			b = checkSorted(t, rest)
		}
	}
	return b
}

// BenchmarkDecodeEntry: a typical agent entry, the fast decoder against
// msgpack's.
func BenchmarkDecodeEntry(b *testing.B) {
	e := Entry{Seq: 42, Role: "agent", Content: "Here is what I found about your flight: it leaves at 9:40 from gate 12.", Time: 1.7e9, Epoch: 3,
		Metadata: map[string]any{"reply_to": uint64(41), "tool": map[string]any{"name": "search", "ok": true}}}
	buf, err := EncodeEntry(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := DecodeEntry(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var x Entry
			if err := msgpack.Unmarshal(buf, &x); err != nil {
				b.Fatal(err)
			}
		}
	})
}
