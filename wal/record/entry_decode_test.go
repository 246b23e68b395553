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
