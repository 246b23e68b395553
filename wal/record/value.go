package record

import (
	"encoding/json"
	"errors"
	"fmt"
)

// MaxValueDepth is how deeply a client-supplied value (a send's metadata,
// the user context) may nest maps and arrays. It is the one rule the
// gateway applies at the door and the reason the log can always read back
// what it stored: an entry wraps such a value in at most ValueEnvelope
// more levels, and the reader accepts MaxReadDepth, which is larger than both
// together. TestDoorRuleFitsReader checks that against the real encoder
// and decoder.
const MaxValueDepth = 32

// ValueEnvelope is how many levels the log wraps around a client value:
// the entry itself, its metadata map, and the context blob's two maps.
const ValueEnvelope = 3

// ErrValueTooDeep and ErrValueType are CheckValue's refusals.
var (
	ErrValueTooDeep = fmt.Errorf("value nests more than %d levels", MaxValueDepth)
	ErrValueType    = errors.New("value holds a type the log cannot store")
)

// CheckValue reports whether v, a value decoded from client JSON, can be
// stored and read back: JSON's types only, nested at most MaxValueDepth
// levels (a map or array holding only scalars is one level).
func CheckValue(v any) error { return checkValue(v, 0) }

func checkValue(v any, depth int) error {
	switch v := v.(type) {
	case nil, bool, string, float64, json.Number, int, int64, uint64:
		return nil
	case map[string]any:
		if depth >= MaxValueDepth {
			return ErrValueTooDeep
		}
		for _, x := range v {
			if err := checkValue(x, depth+1); err != nil {
				return err
			}
		}
		return nil
	case []any:
		if depth >= MaxValueDepth {
			return ErrValueTooDeep
		}
		for _, x := range v {
			if err := checkValue(x, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%w: %T", ErrValueType, v)
}

// ValueSize is roughly the encoded size of a value decoded from JSON, for
// byte limits (context per session, tail budgets). It never allocates.
func ValueSize(v any) int {
	switch v := v.(type) {
	case nil, bool:
		return 1
	case string:
		return len(v) + 2
	case float64, json.Number, int, int64, uint64:
		return 9
	case map[string]any:
		n := 2
		for k, x := range v {
			n += len(k) + 2 + ValueSize(x)
		}
		return n
	case []any:
		n := 2
		for _, x := range v {
			n += ValueSize(x)
		}
		return n
	}
	return 16
}
