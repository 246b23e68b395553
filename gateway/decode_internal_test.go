package gateway

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/tether-dev/tether/gateway/internal/flatjson"
	"github.com/tether-dev/tether/gateway/wire"
)

// FuzzDecodeOnceMatches: whatever the one-pass decoder accepts, the
// two-pass decoder (the reference, which says what is wrong with a frame)
// accepts too, with the very same frame.
func FuzzDecodeOnceMatches(f *testing.F) {
	for _, s := range []string{
		`{"type":"send","id":"a","content":"hi","metadata":{"k":[1,"x",null]}}`,
		`{"type":"hello","token":"t","session_id":"S","last_seq":7,"stream":{"seq":3,"offset":2}}`,
		`{"type":"history","before_seq":10,"limit":5,"id":"x"}`,
		`{"type":"context","set":{"a":{"b":1}}}`,
		`{"type":"ping","id":"p1"}`,
		`{"type":"complete"}`,
		`{"type":"send","limit":"not a number"}`,
		`{"type":"hello","last_seq":-1}`,
		`{"type":5}`,
		`{"content":"no type"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return
		}
		once, ok := decodeOnce(data)
		if !ok {
			return
		}
		slow, err := decodeSlow(data)
		if err != nil {
			t.Fatalf("%s: one pass accepted %+v, two passes refused: %v", data, once, err)
		}
		if !reflect.DeepEqual(once, slow) {
			t.Fatalf("%s: one pass %+v, two passes %+v", data, once, slow)
		}
	})
}

// flatjson.Decode, the hand-written path for flat frames, agrees with
// encoding/json on every frame it takes.
func FuzzDecodeFlatMatches(f *testing.F) {
	for _, s := range []string{
		`{"type":"send","id":"a","content":"hi"}`,
		` { "type" : "send" , "id" : "é🙂" , "content" : "" } `,
		`{"type":"hello","token":"t","session_id":"S","last_seq":7}`,
		`{"type":"history","before_seq":10,"limit":5}`,
		`{"type":"ping","id":"p1"}`,
		`{"type":"complete"}`,
		`{"type":"hello","last_seq":18446744073709551615}`,
		`{"type":"hello","last_seq":18446744073709551616}`,
		`{"type":"history","limit":01}`,
		`{"type":"history","limit":1e2}`,
		`{"type":"send","id":"a","id":"b"}`,
		`{"type":"send","content":"a\nb"}`,
		`{"TYPE":"send"}`,
		`{"type":"send","content":"x"} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		flat, ok := flatjson.Decode(data)
		if ok {
			flat, ok = pick(flat)
		}
		if !ok {
			return
		}
		var viaJSON wire.ClientFrame
		if json.Unmarshal(data, &viaJSON) == nil {
			viaJSON, ok = pick(viaJSON)
		} else {
			ok = false
		}
		if !ok {
			t.Fatalf("%s: the flat path took %+v, encoding/json refused it", data, flat)
		}
		if !reflect.DeepEqual(flat, viaJSON) {
			t.Fatalf("%s: flat path %+v, encoding/json %+v", data, flat, viaJSON)
		}
	})
}

// TestDecodeSaysWhatIsWrong: a frame that is JSON but not a valid frame
// is refused with the field and what it should hold; fields of other
// types are ignored, whatever they hold, and keys match as encoding/json
// matches them.
func TestDecodeSaysWhatIsWrong(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		frame, err string
		want       wire.ClientFrame
	}{
		{frame: `{"type":"send","id":7}`, err: `malformed send frame: "id" is number, want a string`},
		{frame: `{"type":"hello","last_seq":-1}`, err: `malformed hello frame: "last_seq" is number -1, want a non-negative integer`},
		{frame: `{"type":"history","limit":"ten"}`, err: `malformed history frame: "limit" is string, want an integer`},
		{frame: `{"type":"approve","approved":"yes"}`, err: `malformed approve frame: "approved" is string, want true or false`},
		{frame: `{"type":"context","set":[1]}`, err: `malformed context frame: "set" is array, want an object`},
		{frame: `{"type":5}`, err: `malformed client frame: json: cannot unmarshal number into Go struct field .type of type string`},
		{frame: `{"content":"no type"}`, err: `frame has no type`},
		{frame: `null`, err: `frame has no type`},
		{frame: `{"type":"send","metadata":{"n":1e400}}`, err: `malformed send frame: "metadata" holds number 1e400 where a float64 is wanted`},
		{frame: `{"type":"hello","stream":{"seq":"x"}}`, err: `malformed hello frame: "stream.seq" holds string where a uint64 is wanted`},
		{frame: `{"type":"hello","stream":7}`, err: `malformed hello frame: "stream" is number, want an object`},
		{frame: `{"type":"approve","approved":null}`, want: wire.ClientFrame{Type: "approve"}},
		// Fields of other types: ignored whatever they hold.
		{frame: `{"type":"ping","id":"p","last_seq":"x","limit":{}}`, want: wire.ClientFrame{Type: "ping", ID: "p"}},
		// encoding/json's key matching: any case; the last of a repeated key wins.
		{frame: `{"type":"approve","CALL_ID":"c","Approved":false,"approved":true}`, want: wire.ClientFrame{Type: "approve", CallID: "c", Approved: &yes}},
		{frame: `{"type":"send","id":"a","ID":"b","metadata":{"x":1},"metadata":{"y":2},"last_seq":"x"}`,
			want: wire.ClientFrame{Type: "send", ID: "b", Metadata: map[string]any{"x": 1.0, "y": 2.0}}},
	} {
		got, err := decodeSlow([]byte(tc.frame))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: error %v, want %q", tc.frame, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.frame, got, err, tc.want)
		}
		if once, ok := decodeOnce([]byte(tc.frame)); ok && !reflect.DeepEqual(once, got) {
			t.Errorf("%s: one pass %+v, two passes %+v", tc.frame, once, got)
		}
	}
}

// TestFieldCopyMatchesAddr: copy, the fast path's field setter, moves
// each field and only it, the field addr (the slow path's) names; and
// every field of wire.ClientFrame but the type is one of them.
func TestFieldCopyMatchesAddr(t *testing.T) {
	yes := true
	full := wire.ClientFrame{
		Token: "t", SessionID: "s", LastSeq: 1, Stream: &wire.StreamMark{Seq: 2}, Attach: "a",
		ID: "i", Content: "c", Metadata: map[string]any{"m": 1.0}, Interrupt: true,
		BeforeSeq: 3, Limit: 4, Set: map[string]any{"s": 1.0}, ReplyTo: 5, CallID: "k", Approved: &yes,
	}
	if n := reflect.TypeFor[wire.ClientFrame]().NumField() - 1; n != len(fields) {
		t.Fatalf("wire.ClientFrame has %d fields besides its type, the decoder knows %d", n, len(fields))
	}
	for fl := range field(len(fields)) {
		var got, want wire.ClientFrame
		fl.copy(&got, &full)
		reflect.ValueOf(fl.addr(&want)).Elem().Set(reflect.ValueOf(fl.addr(&full)).Elem())
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: copy set %+v, addr names %+v", fields[fl].name, got, want)
		}
		if reflect.ValueOf(want).IsZero() {
			t.Errorf("%s: addr names a field the full frame leaves empty", fields[fl].name)
		}
		// The name is the JSON name of that field of wire.ClientFrame.
		var named map[string]any
		if data, err := json.Marshal(want); err != nil {
			t.Fatal(err)
		} else if err := json.Unmarshal(data, &named); err != nil {
			t.Fatal(err)
		}
		if _, ok := named[fields[fl].name]; !ok || len(named) != 2 { // and "type"
			t.Errorf("%s: the field addr names is %v in JSON", fields[fl].name, named)
		}
	}
}
