package wal

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/wal/record/recordtest"
)

func TestCheckValue(t *testing.T) {
	ok := []any{
		nil, true, "s", 1.5, json.Number("2"), 3, int64(-4), uint64(5),
		map[string]any{}, []any{}, map[string]any{"a": []any{1.0, "x", nil, map[string]any{"b": false}}},
	}
	for _, v := range ok {
		if err := CheckValue(v); err != nil {
			t.Errorf("CheckValue(%#v) = %v", v, err)
		}
	}
	for _, v := range []any{
		make(chan int), func() {}, struct{}{}, map[string]string{"a": "b"}, []string{"a"}, float32(1), []byte("x"),
		map[string]any{"deep": []any{1.0, map[string]any{"f": func() {}}}},
	} {
		if err := CheckValue(v); !errors.Is(err, ErrValueType) {
			t.Errorf("CheckValue(%T) = %v, want ErrValueType", v, err)
		}
	}
	for _, mapsFirst := range []bool{true, false} {
		for _, leaf := range []any{1.0, map[string]any{}, []any{}} {
			// An empty map or array is a level of its own.
			extra := recordtest.DepthOf(leaf)
			at := recordtest.Nest(MaxValueDepth-extra, mapsFirst, leaf)
			if d := recordtest.DepthOf(at); d != MaxValueDepth {
				t.Fatalf("test value has depth %d", d)
			}
			if err := CheckValue(at); err != nil {
				t.Errorf("CheckValue at MaxValueDepth (maps first %v, leaf %v): %v", mapsFirst, leaf, err)
			}
			if err := CheckValue(recordtest.Nest(MaxValueDepth+1-extra, mapsFirst, leaf)); !errors.Is(err, ErrValueTooDeep) {
				t.Errorf("CheckValue at MaxValueDepth+1 (maps first %v, leaf %v): %v, want ErrValueTooDeep", mapsFirst, leaf, err)
			}
		}
	}
	// Depth is the deepest branch, not the sum.
	wide := map[string]any{}
	for i := range 100 {
		wide[fmt.Sprint(i)] = recordtest.Nest(MaxValueDepth-1, i%2 == 0, "x")
	}
	if err := CheckValue(wide); err != nil {
		t.Errorf("CheckValue of 100 branches at MaxValueDepth: %v", err)
	}
	wide["deep"] = recordtest.Nest(MaxValueDepth, true, "x")
	if err := CheckValue(wide); !errors.Is(err, ErrValueTooDeep) {
		t.Errorf("CheckValue with one branch too deep: %v", err)
	}
}

// The door rule fits the reader: what CheckValue lets in, the log stores
// and reads back equal, and the reader's own nesting limit (MaxReadDepth) has
// room for it inside the log's envelope.
func TestDoorRuleFitsReader(t *testing.T) {
	if MaxReadDepth <= MaxValueDepth+ValueEnvelope {
		t.Fatalf("reader limit %d is not above MaxValueDepth %d + envelope %d", MaxReadDepth, MaxValueDepth, ValueEnvelope)
	}
	var deepest []any
	for _, mapsFirst := range []bool{true, false} {
		for _, leaf := range []any{"leaf", map[string]any{}, []any{}} {
			v := recordtest.Nest(MaxValueDepth-recordtest.DepthOf(leaf), mapsFirst, leaf)
			if err := CheckValue(v); err != nil {
				t.Fatal(err)
			}
			deepest = append(deepest, v)
		}
	}

	l := newTestLog(t)
	mustCreate(t, l, activeHeader("deep"))
	var seq uint64
	for i, v := range deepest {
		// As a value inside the metadata, and as the metadata itself.
		metas := []map[string]any{{"v": v}}
		if m, ok := v.(map[string]any); ok {
			metas = append(metas, m)
		}
		for _, m := range metas {
			seq++
			e := entry(seq)
			e.Metadata = m

			// Raw bytes through EncodeEntry and DecodeEntry.
			b, err := EncodeEntry(e)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeEntry(b)
			if err != nil {
				t.Fatalf("value %d: DecodeEntry of what the door allows: %v", i, err)
			}
			if !recordtest.SameJSON(t, got.Metadata, m) {
				t.Fatalf("value %d: DecodeEntry changed the metadata", i)
			}

			// Through the log.
			bt := batch(activeHeader("deep"), 1, seq, seq)
			bt.Entries[0].Metadata = m
			mustAppend(t, l, bt)
			es := mustRead(t, l, "deep", seq, seq+1, 1, false)
			if len(es) != 1 || isUnreadable(es[0]) || !recordtest.SameJSON(t, es[0].Metadata, m) {
				t.Fatalf("value %d: read back %+v", i, es)
			}
		}
	}
	if st := l.Stats(); st.Corrupt != 0 {
		t.Fatalf("Stats.Corrupt = %d", st.Corrupt)
	}

	// The deepest door value wrapped in the whole envelope, inside an
	// entry's metadata (itself two levels: the entry and its metadata),
	// still decodes.
	wrapped := deepest[0]
	for range ValueEnvelope {
		wrapped = map[string]any{"w": wrapped}
	}
	e := entry(1)
	e.Metadata = map[string]any{"v": wrapped}
	if _, err := DecodeEntry(mustEncode(t, e)); err != nil {
		t.Fatalf("DecodeEntry of a door value inside the envelope: %v", err)
	}

	// And the reader does have a limit: find it, and check it is above the
	// door's depth plus the envelope and the entry around it.
	limit := 0
	for d := 1; d < 4*MaxReadDepth; d++ {
		e.Metadata = map[string]any{"v": recordtest.Nest(d, true, "x")}
		if _, err := DecodeEntry(mustEncode(t, e)); err != nil {
			if !strings.Contains(err.Error(), "deep") {
				t.Fatalf("DecodeEntry at depth %d: %v", d, err)
			}
			limit = d - 1
			break
		}
	}
	if limit == 0 {
		t.Fatal("DecodeEntry has no nesting limit")
	}
	t.Logf("deepest metadata value the reader takes: %d levels (door: %d)", limit, MaxValueDepth)
	if limit < MaxValueDepth+ValueEnvelope {
		t.Fatalf("the reader takes metadata values of %d levels, the door lets in %d plus an envelope of %d",
			limit, MaxValueDepth, ValueEnvelope)
	}
}

func TestValueSize(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{
		{nil, 1}, {true, 1}, {"abc", 5}, {1.5, 9}, {json.Number("12"), 9}, {7, 9},
		{map[string]any{}, 2}, {[]any{}, 2},
		{map[string]any{"ab": "cd"}, 2 + 2 + 2 + 4},
		{[]any{1.0, "x", nil}, 2 + 9 + 3 + 1},
	} {
		if got := ValueSize(c.v); got != c.want {
			t.Errorf("ValueSize(%#v) = %d, want %d", c.v, got, c.want)
		}
	}
	// Roughly the encoded size, for values as they come from JSON.
	for _, js := range []string{
		`{"a":"` + strings.Repeat("x", 1000) + `"}`,
		`[1,2,3,4,5,6,7,8,9,10.5]`,
		`{"user":{"name":"ann","prefs":{"lang":"en","tz":"UTC"},"tags":["a","b","c"]}}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(js), &v); err != nil {
			t.Fatal(err)
		}
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if n := ValueSize(v); n < len(b)/2 || n > 2*len(b)+8 {
			t.Errorf("ValueSize(%s) = %d, msgpack takes %d bytes", js, n, len(b))
		}
	}
	// It grows with the value and never allocates.
	v := recordtest.Nest(MaxValueDepth, true, strings.Repeat("y", 100))
	if ValueSize(v) <= ValueSize(recordtest.Nest(MaxValueDepth-1, true, strings.Repeat("y", 100))) {
		t.Error("ValueSize does not grow with depth")
	}
	if n := testing.AllocsPerRun(100, func() { ValueSize(v) }); n != 0 {
		t.Errorf("ValueSize allocates %v times", n)
	}
	// Entry.Size counts the metadata.
	e := entry(1)
	bare := e.Size()
	e.Metadata = map[string]any{"k": strings.Repeat("z", 500)}
	if e.Size() < bare+500 {
		t.Errorf("Entry.Size with 500 bytes of metadata = %d, without %d", e.Size(), bare)
	}
}

// Metadata numbers that came from JSON come back as numbers of the same
// value (float64 in, float64 out), so a client sees what it sent.
func TestMetadataNumbersRoundTrip(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeHeader("n"))
	var m map[string]any
	if err := json.Unmarshal([]byte(`{"i":3,"f":-0.25,"big":1e300,"neg":-7,"z":0,"arr":[1,2.5]}`), &m); err != nil {
		t.Fatal(err)
	}
	b := batch(activeHeader("n"), 1, 1, 1)
	b.Entries[0].Metadata = m
	mustAppend(t, l, b)
	got := mustRead(t, l, "n", 1, 2, 1, false)[0].Metadata
	if !recordtest.SameJSON(t, got, m) {
		t.Fatalf("metadata %v came back as %v", m, got)
	}
	if _, ok := got["i"].(float64); !ok {
		t.Fatalf("a JSON number came back as %T", got["i"])
	}
}
