package jsonenc

import (
	"bytes"
	"slices"
	"strconv"
	"unsafe"

	"github.com/tether-dev/tether/wal/record"
)

// AppendStored writes an entry as the log stores it (its msgpack bytes)
// as AppendMessage writes the decoded entry with typ "", without decoding
// it into Go values: a replay of a thousand entries would otherwise
// allocate for every string and map in them. ok is false, with b as it
// was, when the bytes use a form only the full decoder reads.
func AppendStored(b, stored []byte) (_ []byte, ok bool) {
	v, err := record.ViewEntry(stored)
	if err != nil {
		return b, false
	}
	n := len(b)
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, v.Seq, 10)
	b = append(b, `,"role":`...)
	b = AppendString(b, str(v.Role))
	b = append(b, `,"content":`...)
	b = AppendString(b, str(v.Content))
	b = append(b, `,"timestamp":`...)
	b = AppendFloat(b, v.Time)
	b = append(b, `,"metadata":`...)
	if v.Meta == nil {
		b = append(b, "{}"...)
	} else if b, _, ok = appendItem(b, v.Meta, 1); !ok {
		return b[:n], false
	}
	return append(b, '}'), true
}

// str views p as a string for AppendString, which only reads it.
func str(p []byte) string { return unsafe.String(unsafe.SliceData(p), len(p)) }

// pair is a map entry's key and its value's msgpack bytes.
type pair struct{ k, v []byte }

// appendItem writes the msgpack item at the start of m as AppendValue
// writes what the decoder makes of it (maps with their keys sorted), and
// returns what follows it. depth is the item's nesting, as the decoder
// counts it.
func appendItem(b, m []byte, depth int) (_, rest []byte, ok bool) {
	if depth > record.MaxReadDepth {
		return b, nil, false
	}
	t, m, err := record.ReadToken(m)
	if err != nil {
		return b, nil, false
	}
	switch t.Kind {
	case record.KindNil:
		return append(b, "null"...), m, true
	case record.KindBool:
		return strconv.AppendBool(b, t.Bool), m, true
	case record.KindInt:
		return strconv.AppendInt(b, t.Int, 10), m, true
	case record.KindUint:
		return strconv.AppendUint(b, t.Uint, 10), m, true
	case record.KindFloat:
		return AppendFloat(b, t.Float), m, true
	case record.KindFloat32:
		return AppendValue(b, float32(t.Float)), m, true
	case record.KindString:
		return AppendString(b, str(t.Str)), m, true
	case record.KindArray:
		b = append(b, '[')
		for i := range t.N {
			if i > 0 {
				b = append(b, ',')
			}
			if b, m, ok = appendItem(b, m, depth+1); !ok {
				return b, nil, false
			}
		}
		return append(b, ']'), m, true
	case record.KindMap:
		return appendMap(b, m, t.N, depth)
	}
	return b, nil, false
}

// appendMap writes a map of n pairs whose keys are strings, sorted by key
// as AppendValue sorts them. A key twice (which the decoder would have
// kept once) is left to the decoder.
func appendMap(b, m []byte, n, depth int) (_, rest []byte, ok bool) {
	var small [8]pair
	pairs := small[:0]
	for range n {
		k, after, err := record.ReadToken(m)
		if err != nil || k.Kind != record.KindString {
			return b, nil, false
		}
		end, err := record.SkipValue(after, depth+1)
		if err != nil {
			return b, nil, false
		}
		pairs = append(pairs, pair{k.Str, after[:len(after)-len(end)]})
		m = end
	}
	slices.SortFunc(pairs, func(x, y pair) int { return bytes.Compare(x.k, y.k) })
	b = append(b, '{')
	for i, p := range pairs {
		if i > 0 {
			if bytes.Equal(p.k, pairs[i-1].k) {
				return b, nil, false
			}
			b = append(b, ',')
		}
		b = AppendString(b, str(p.k))
		b = append(b, ':')
		if b, _, ok = appendItem(b, p.v, depth+1); !ok {
			return b, nil, false
		}
	}
	return append(b, '}'), m, true
}
