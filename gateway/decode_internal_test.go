package gateway

import (
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/tether-dev/tether/gateway/internal/flatjson"
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
			flat, ok = pickStorable(flat)
		}
		if !ok {
			return
		}
		viaJSON, ok := decodeJSON(data)
		if !ok {
			t.Fatalf("%s: the flat path took %+v, encoding/json refused it", data, flat)
		}
		if !reflect.DeepEqual(flat, viaJSON) {
			t.Fatalf("%s: flat path %+v, encoding/json %+v", data, flat, viaJSON)
		}
	})
}
