package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/wal/record/recordtest"
)

func fuzzEntrySeeds() []Entry {
	return []Entry{
		{Seq: 1, Role: "user", Content: "hello"},
		{Seq: 2, Role: "assistant", Content: "Hi! How can I help?", Time: 1.7e9 + 0.25, Epoch: 3},
		{Seq: 3, Role: "tool", Content: "", Time: -1, Metadata: map[string]any{"call_id": "c1", "status": "started", "n": 3, "args": map[string]any{"q": []any{"a", 1.5, true, nil}}}},
		{Seq: 1<<64 - 1, Role: "\x00\xff", Content: string(make([]byte, 300))},
		{Seq: 4, Role: "user", Metadata: map[string]any{"deep": recordtest.Nest(MaxValueDepth, true, "x")}},
		{Seq: 5, Role: "agent", Metadata: map[string]any{"reply_to": uint64(4), "i": -3, "big": int64(-1 << 40), "u8": uint8(200), "f32": float32(1.5), "s": strings.Repeat("é", 100), "empty": map[string]any{}, "list": []any{}}},
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, e := range fuzzEntrySeeds() {
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
		if e2.Seq != e.Seq || e2.Role != e.Role || e2.Content != e.Content || e2.Epoch != e.Epoch {
			t.Fatalf("round trip changed the entry: %+v -> %+v", e, e2)
		}
		if e2.Time != e.Time && !(e.Time != e.Time && e2.Time != e2.Time) { // NaN stays NaN
			t.Fatalf("round trip changed the time: %v -> %v", e.Time, e2.Time)
		}
	})
}

// FuzzValueRoundTrip: whatever JSON a client may send, if CheckValue lets
// it in, the log stores it as an entry's metadata and reads it back
// unchanged (as the client would see it: its JSON).
func FuzzValueRoundTrip(f *testing.F) {
	seed := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, mapsFirst := range []bool{true, false} {
		seed(recordtest.Nest(MaxValueDepth, mapsFirst, "leaf"))
		seed(recordtest.Nest(MaxValueDepth-1, mapsFirst, map[string]any{}))
		seed(recordtest.Nest(MaxValueDepth+1, mapsFirst, 1.0)) // refused at the door
	}
	wide := map[string]any{}
	for i := range 100 {
		wide[fmt.Sprint("k", i)] = []any{float64(i), fmt.Sprint(i), i%2 == 0, nil}
	}
	seed(wide)
	seed(make([]any, 500))
	seed(strings.Repeat("s", 3000))
	for _, s := range []string{
		`null`, `true`, `0`, `-0`, `1e308`, `-1.5e-300`, `123456789012345678901234567890`, `""`,
		`"\u0000\ud83d\ude00é"`, `{}`, `[]`, `{"":{"":[]}}`, `{"a":1,"a":2}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`{"user":{"name":"ann","prefs":{"lang":"en"},"tags":["a",1,null,false,{"x":[]}]}}`,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return
		}
		if err := CheckValue(v); err != nil {
			return
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal of what json.Unmarshal made: %v", err)
		}
		// As a value inside the metadata, and (an object) as the metadata
		// itself.
		type stored struct {
			meta    map[string]any
			wrapped bool
		}
		cases := []stored{{map[string]any{"v": v}, true}}
		if m, ok := v.(map[string]any); ok {
			cases = append(cases, stored{m, false})
		}
		for _, c := range cases {
			e := Entry{Seq: 7, Role: "user", Content: "c", Time: 1.7e9, Metadata: c.meta}
			b, err := EncodeEntry(e)
			if err != nil {
				t.Fatalf("EncodeEntry of a value CheckValue accepts: %v", err)
			}
			got, err := DecodeEntry(b)
			if err != nil {
				t.Fatalf("DecodeEntry of a value CheckValue accepts (%s): %v", want, err)
			}
			var back any = got.Metadata
			if c.wrapped {
				back = got.Metadata["v"]
			} else if len(c.meta) == 0 && got.Metadata == nil {
				// Entry.Metadata is omitempty: empty metadata is no
				// metadata, on disk as on the wire.
				continue
			}
			gotJSON, err := json.Marshal(back)
			if err != nil {
				t.Fatalf("json.Marshal of the value read back: %v", err)
			}
			if string(gotJSON) != string(want) {
				t.Fatalf("stored %s, read back %s", want, gotJSON)
			}
		}
	})
}

// FuzzFastDecodeMatches: the fast entry decoder gives what the msgpack
// decoder gives, or leaves the input to it.
func FuzzFastDecodeMatches(f *testing.F) {
	for _, e := range fuzzEntrySeeds() {
		b, err := EncodeEntry(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if checkMsgpack(data) != nil {
			return
		}
		fast, err := decodeEntryFast(data)
		if err != nil {
			if !errors.Is(err, errSlowPath) {
				t.Fatalf("fast decoder: %v", err)
			}
			return
		}
		var slow Entry
		if err := msgpack.Unmarshal(data, &slow); err != nil {
			t.Fatalf("fast decoder read %x, msgpack fails: %v", data, err)
		}
		fast.Metadata, _ = withoutNaN(fast.Metadata).(map[string]any)
		slow.Metadata, _ = withoutNaN(slow.Metadata).(map[string]any)
		if fast.Time != fast.Time && slow.Time != slow.Time {
			fast.Time, slow.Time = 0, 0
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast %#v\nslow %#v", fast, slow)
		}
	})
}

// withoutNaN replaces NaNs (never equal to themselves) with a marker, so
// values can be compared with reflect.DeepEqual.
func withoutNaN(v any) any {
	switch x := v.(type) {
	case float64:
		if x != x {
			return "NaN64"
		}
	case float32:
		if x != x {
			return "NaN32"
		}
	case map[string]any:
		if x == nil {
			return x
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = withoutNaN(e)
		}
		return m
	case []any:
		if x == nil {
			return x
		}
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = withoutNaN(e)
		}
		return s
	}
	return v
}

// FuzzSkipValueMatchesTokens: SkipValue, which reads only headers and
// lengths, ends an item where walking it token by token ends it, and
// refuses what that walk refuses.
func FuzzSkipValueMatchesTokens(f *testing.F) {
	for _, e := range fuzzEntrySeeds() {
		b, err := EncodeEntry(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xdc, 0x00, 0x02, 0xc0, 0xc3})
	f.Add([]byte{0xc4, 0x01, 0x00})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gerr := SkipValue(data, 1)
		want, werr := skipByTokens(data, 1)
		if (gerr == nil) != (werr == nil) || len(got) != len(want) {
			t.Fatalf("SkipValue(%x) leaves %d bytes (%v), the token walk %d (%v)", data, len(got), gerr, len(want), werr)
		}
	})
}

// skipByTokens is SkipValue as ReadToken walks an item: the reference.
func skipByTokens(b []byte, depth int) ([]byte, error) {
	if depth > MaxReadDepth {
		return nil, ErrNotPlain
	}
	t, b, err := ReadToken(b)
	if err != nil {
		return nil, err
	}
	n := t.N
	if t.Kind == KindMap {
		n *= 2
	}
	for range n {
		if b, err = skipByTokens(b, depth+1); err != nil {
			return nil, err
		}
	}
	return b, nil
}
