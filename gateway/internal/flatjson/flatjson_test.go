package flatjson

import "testing"

// Decode takes the frames it is for, and refuses the ones it is not.
func TestDecodeTakes(t *testing.T) {
	for _, s := range []string{
		`{"type":"send","id":"m1","content":"hello"}`,
		`{"type":"ping","id":"p"}`,
		`{"type":"history","before_seq":3,"limit":2}`,
		`{"type":"hello","token":"t","session_id":"s","last_seq":0}`,
	} {
		if _, ok := Decode([]byte(s)); !ok {
			t.Errorf("%s: not taken", s)
		}
	}
	for _, s := range []string{
		`{"type":"send","id":"m1","content":"a\"b"}`,
		`{"type":"send","metadata":{}}`,
		`{"type":"history","limit":-1}`,
		`{"type":"send","id":"a","id":"b"}`,
	} {
		if _, ok := Decode([]byte(s)); ok {
			t.Errorf("%s: taken", s)
		}
	}
}
