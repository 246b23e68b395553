package recordtest

import (
	"encoding/json"
	"testing"
)

// Nest wraps leaf in depth levels of maps and arrays, alternating (maps
// on even levels when mapsFirst), each level also holding a scalar.
func Nest(depth int, mapsFirst bool, leaf any) any {
	v := leaf
	for i := depth - 1; i >= 0; i-- {
		if (i%2 == 0) == mapsFirst {
			v = map[string]any{"k": v, "n": float64(i)}
		} else {
			v = []any{"s", v}
		}
	}
	return v
}

// DepthOf counts levels as CheckValue does: a map or array holding only
// scalars is one level.
func DepthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, x := range v {
			d = max(d, DepthOf(x))
		}
		return d + 1
	case []any:
		for _, x := range v {
			d = max(d, DepthOf(x))
		}
		return d + 1
	}
	return 0
}

// SameJSON reports whether a and b encode to the same JSON (maps sorted),
// which is what a client gets back.
func SameJSON(tb testing.TB, a, b any) bool {
	tb.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		tb.Fatalf("json.Marshal(%v): %v", a, err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		tb.Fatalf("json.Marshal(%v): %v", b, err)
	}
	return string(ja) == string(jb)
}
