package gateway

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/wal"
)

// semantic decodes a frame the way a client does.
func semantic(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return v
}

// viaJSON is what encoding/json makes of the same frame.
func viaJSON(t *testing.T, o machine.Out) []byte {
	t.Helper()
	var v any
	switch o := o.(type) {
	case *machine.EntryOut:
		v = MessageOf(o.Entry, "message")
	case *machine.BatchOut:
		es, err := o.Entries()
		if err != nil {
			t.Fatal(err)
		}
		v = batchFrame(&machine.BatchOut{Messages: es, Omitted: o.Omitted, Summary: o.Summary})
	case *machine.DeltaOut:
		v = deltaFrame(o)
	default:
		t.Fatalf("no reference encoding for %T", o)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// batchFrame is a history_batch as encoding/json writes it.
func batchFrame(o *machine.BatchOut) wire.HistoryBatch {
	b := wire.HistoryBatch{Type: wire.TypeHistoryBatch, Messages: make([]wire.Message, len(o.Messages)), Omitted: o.Omitted}
	for i, e := range o.Messages {
		b.Messages[i] = MessageOf(e, "")
	}
	if n := len(o.Messages); n > 0 {
		b.FirstSeq, b.LastSeq = o.Messages[0].Seq, o.Messages[n-1].Seq
	}
	if o.Summary != "" {
		s := o.Summary
		b.Summary = &s
	}
	return b
}

func checkSame(t *testing.T, o machine.Out) {
	t.Helper()
	fast, err := encodeOut(o)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := semantic(t, fast), semantic(t, viaJSON(t, o)); !reflect.DeepEqual(got, want) {
		t.Fatalf("fast encoding differs:\n got %s\nwant %s", fast, viaJSON(t, o))
	}
}

var awkward = []string{
	"", "plain", `quote " and \ backslash`, "new\nline\ttab\rcr", "\x00\x01\x1f control", "<script>&amp;</script>",
	"é ü 漢字 🎉", "line\u2028sep\u2029", "bad \xff\xfe utf-8", "\u007f del",
}

func TestFastEncodingMatchesJSON(t *testing.T) {
	floats := []float64{0, 1, -1, 1.5, 1e20, 1e21, 1.25e-7, 1764540000.123456, 123456789012345678, math.SmallestNonzeroFloat64}
	for i, s := range awkward {
		md := map[string]any{
			"id": s, s: s, "n": floats[i%len(floats)], "i8": int8(-5), "u64": uint64(1 << 60), "b": true, "nil": nil,
			"nested": map[string]any{"a": []any{1.0, "x", false, nil, map[string]any{"deep": s}}},
		}
		e := wal.Entry{Seq: uint64(i + 1), Role: "user", Content: s, Time: floats[i%len(floats)], Metadata: md}
		checkSame(t, &machine.EntryOut{Entry: e})
		checkSame(t, &machine.EntryOut{Entry: wal.Entry{Seq: 9, Role: "agent", Content: s}})
		checkSame(t, &machine.DeltaOut{Seq: 3, From: 0, Part: i, Text: s})
		checkSame(t, &machine.DeltaOut{Seq: 3, From: i, Part: i + 2, Text: s})
		checkSame(t, &machine.BatchOut{Messages: []wal.Entry{e, e}, Omitted: 7, Summary: s})
		raw := stored(t, e)
		checkSame(t, &machine.BatchOut{Stored: []wal.RawEntry{raw, raw}, Omitted: 7, Summary: s})
		checkSame(t, &machine.BatchOut{Stored: []wal.RawEntry{raw}, Messages: []wal.Entry{e}})
	}
	checkSame(t, &machine.BatchOut{})
	if b, _ := encodeOut(&machine.AckOut{ID: awkward[2], Seq: 12}); !reflect.DeepEqual(semantic(t, b),
		map[string]any{"type": "ack", "id": awkward[2], "seq": 12.0}) {
		t.Fatalf("ack %s", b)
	}
}

// stored is e as the log stores it.
func stored(t *testing.T, e wal.Entry) wal.RawEntry {
	t.Helper()
	b, err := wal.EncodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	return wal.RawEntry{Seq: e.Seq, Bytes: b}
}

func FuzzFastEncoding(f *testing.F) {
	for _, s := range awkward {
		f.Add(s, 1.5)
	}
	f.Fuzz(func(t *testing.T, s string, x float64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return // encoding/json refuses them; the server never makes them
		}
		e := wal.Entry{Seq: 1, Role: "user", Content: s, Time: x, Metadata: map[string]any{s: x, "k": []any{s}}}
		checkSame(t, &machine.EntryOut{Entry: e})
	})
}
