package jsonenc

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/wal/record"
)

// entries are the shapes the log writes: every value type metadata can
// hold, keys out of order, awkward strings, deep nesting.
func entries() []record.Entry {
	return []record.Entry{
		{Seq: 1, Role: "user", Content: "hello", Time: 1.7e9 + 0.25},
		{Seq: 2, Role: "agent", Content: "quote \" \\ \n\t \x00 \u2028 \xff é 漢字", Time: -1, Epoch: 3},
		{Seq: 3, Role: "tool", Metadata: map[string]any{"call_id": "c1", "status": "started", "args": map[string]any{"z": 1, "a": []any{"x", 1.5, true, nil, -3}}}},
		{Seq: 4, Role: "user", Metadata: map[string]any{"n": math.SmallestNonzeroFloat64, "big": 1e21, "small": 1.25e-7, "i": int64(-1 << 40), "u": uint64(1 << 63), "u8": uint8(200), "f32": float32(1.1), "empty": map[string]any{}, "list": []any{}}},
		{Seq: 5, Role: "user", Metadata: map[string]any{"deep": nest(record.MaxValueDepth)}},
		{Seq: 1<<64 - 1, Role: strings.Repeat("r", 300), Content: strings.Repeat("é", 70000)},
		{Seq: 6, Role: "user", Metadata: map[string]any{}},
	}
}

func nest(n int) any {
	var v any = "x"
	for range n - 1 {
		v = map[string]any{"k": []any{v}}
	}
	return v
}

// checkStored: what AppendStored writes from the stored bytes is, byte
// for byte, what AppendMessage writes from the decoded entry, or it says
// it cannot and writes nothing.
func checkStored(t *testing.T, b []byte, mustTranscode bool) {
	t.Helper()
	e, err := record.DecodeEntry(b)
	if err != nil {
		return
	}
	prefix := []byte("[")
	got, ok := AppendStored(prefix, b)
	if !ok {
		if mustTranscode {
			t.Fatalf("entry %d not transcoded", e.Seq)
		}
		if !bytes.Equal(got, prefix) {
			t.Fatalf("a refusal wrote %q", got)
		}
		return
	}
	want := AppendMessage([]byte("["), &e, "")
	if !bytes.Equal(got, want) {
		t.Fatalf("entry %d:\n got %s\nwant %s", e.Seq, got, want)
	}
}

func TestStoredIsTheDecodedMessage(t *testing.T) {
	for _, e := range entries() {
		b, err := record.EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		checkStored(t, b, true)
		// As entries written before the log sorted metadata keys are,
		// and with the fields out of the log's order.
		for _, b := range [][]byte{encodeBackwards(t, e, false), encodeBackwards(t, e, true)} {
			checkStored(t, b, true)
		}
	}
}

// encodeBackwards encodes e as the log does but with every map's keys in
// reverse order, and with fields too when fields is set.
func encodeBackwards(tb testing.TB, e record.Entry, fields bool) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	kv := []any{"q", e.Seq, "r", e.Role, "c", e.Content, "t", e.Time}
	if len(e.Metadata) > 0 {
		kv = append(kv, "m", e.Metadata)
	}
	if e.Epoch != 0 {
		kv = append(kv, "e", e.Epoch)
	}
	if fields {
		for i, j := 0, len(kv)-2; i < j; i, j = i+2, j-2 {
			kv[i], kv[i+1], kv[j], kv[j+1] = kv[j], kv[j+1], kv[i], kv[i+1]
		}
	}
	if err := enc.EncodeMapLen(len(kv) / 2); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < len(kv); i += 2 {
		if err := enc.EncodeString(kv[i].(string)); err != nil {
			tb.Fatal(err)
		}
		if err := encodeValueBackwards(enc, kv[i+1]); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

func encodeValueBackwards(enc *msgpack.Encoder, v any) error {
	switch v := v.(type) {
	case map[string]any:
		keys := slices.Sorted(maps.Keys(v))
		slices.Reverse(keys)
		if err := enc.EncodeMapLen(len(keys)); err != nil {
			return err
		}
		for _, k := range keys {
			if err := enc.EncodeString(k); err != nil {
				return err
			}
			if err := encodeValueBackwards(enc, v[k]); err != nil {
				return err
			}
		}
		return nil
	case []any:
		if err := enc.EncodeArrayLen(len(v)); err != nil {
			return err
		}
		for _, x := range v {
			if err := encodeValueBackwards(enc, x); err != nil {
				return err
			}
		}
		return nil
	}
	return enc.Encode(v)
}

// A stored entry the views do not read (here: a map key that is not a
// string, a key twice) is left to the decoder.
func TestStoredLeavesOddFormsToTheDecoder(t *testing.T) {
	for _, b := range [][]byte{
		// {"q":1, "m":{1:"x"}}
		{0x82, 0xa1, 'q', 0x01, 0xa1, 'm', 0x81, 0x01, 0xa1, 'x'},
		// {"q":1, "m":{"a":1, "a":2}}
		{0x82, 0xa1, 'q', 0x01, 0xa1, 'm', 0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02},
	} {
		if _, ok := AppendStored(nil, b); ok {
			t.Fatalf("% x transcoded", b)
		}
	}
}

func FuzzStoredIsTheDecodedMessage(f *testing.F) {
	for _, e := range entries() {
		b, err := record.EncodeEntry(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(encodeBackwards(f, e, false))
		f.Add(encodeBackwards(f, e, true))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkStored(t, b, false) })
}

// BenchmarkBatch: a resume's 200 entries, transcoded from their stored
// bytes against decoded and encoded again.
func BenchmarkBatch(b *testing.B) {
	var raws []record.RawEntry
	for i := range 200 {
		e := record.Entry{Seq: uint64(i + 1), Role: "agent", Content: strings.Repeat("Here is what I found. ", 8), Time: 1.7e9,
			Metadata: map[string]any{"reply_to": uint64(i), "id": "m-123456", "tool": map[string]any{"name": "search", "ok": true}}}
		p, err := record.EncodeEntry(e)
		if err != nil {
			b.Fatal(err)
		}
		raws = append(raws, record.RawEntry{Seq: e.Seq, Bytes: p})
	}
	buf := make([]byte, 0, 1<<17)
	b.Run("stored", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := AppendBatch(buf[:0], raws, nil, 0, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("chat", func(b *testing.B) {
		// 1,000 entries shaped as a chat's: a user's with its client id,
		// the agent's reply with reply_to, a timestamp with a fraction.
		chat := make([]record.RawEntry, 1000)
		for i := range chat {
			e := record.Entry{Seq: uint64(i + 1), Role: "user", Content: fmt.Sprintf("message number %d of the benchmark", i/2),
				Time: 1765065600.123456789 + float64(i), Metadata: map[string]any{"id": fmt.Sprintf("m%d", i/2)}}
			if i%2 == 1 {
				e.Role, e.Content, e.Metadata = "agent", "echo: "+e.Content, map[string]any{"reply_to": uint64(i)}
			}
			p, err := record.EncodeEntry(e)
			if err != nil {
				b.Fatal(err)
			}
			chat[i] = record.RawEntry{Seq: e.Seq, Bytes: p}
		}
		b.ReportAllocs()
		for range b.N {
			if _, err := AppendBatch(buf[:0], chat, nil, 0, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoded", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			es := make([]record.Entry, len(raws))
			for i := range raws {
				var err error
				if es[i], err = raws[i].Decode(); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := AppendBatch(buf[:0], nil, es, 0, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
}
