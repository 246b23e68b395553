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
	if out, ok := appendInOrder(b, stored); ok {
		return out, true
	}
	v, err := record.ViewEntry(stored)
	if err != nil {
		return b, false
	}
	n := len(b)
	b = appendHead(b, v.Seq, v.Role, v.Content, v.Time)
	if v.Meta == nil {
		b = append(b, "{}"...)
	} else if b, _, ok = appendItem(b, v.Meta, 1); !ok {
		return b[:n], false
	}
	return append(b, '}'), true
}

// appendInOrder is AppendStored in one pass over the bytes, for an entry
// whose fields are in the order the log writes them (q r c t, then m and
// e when it has them), which is also the order of the JSON's: its
// metadata goes straight from msgpack to JSON, never skipped over first.
// ok is false, with b as it was, for any other entry.
func appendInOrder(b, stored []byte) (_ []byte, ok bool) {
	v, pairs, m, ok := record.ViewHead(stored)
	if !ok {
		return b, false
	}
	n := len(b)
	b = appendHead(b, v.Seq, v.Role, v.Content, v.Time)
	meta := false
	for range pairs {
		k, rest, err := record.ReadToken(m)
		if err != nil || k.Kind != record.KindString || len(k.Str) != 1 {
			return b[:n], false
		}
		switch {
		case k.Str[0] == 'm' && !meta && len(rest) > 0 && rest[0] == 0xc0:
			b, m, meta = append(b, "{}"...), rest[1:], true
		case k.Str[0] == 'm' && !meta:
			if !record.StartsMap(rest) {
				return b[:n], false
			}
			if b, m, ok = appendItem(b, rest, 1); !ok {
				return b[:n], false
			}
			meta = true
		case k.Str[0] == 'e':
			var e record.Token
			if e, m, err = record.ReadToken(rest); err != nil || e.Kind != record.KindUint {
				return b[:n], false
			}
			if !meta {
				b, meta = append(b, "{}"...), true // the epoch is last
			}
		default:
			return b[:n], false
		}
	}
	if len(m) != 0 {
		return b[:n], false
	}
	if !meta {
		b = append(b, "{}"...)
	}
	return append(b, '}'), true
}

// appendHead writes an entry's object up to its metadata's value.
func appendHead(b []byte, seq uint64, role, content []byte, time float64) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"role":`...)
	b = AppendString(b, str(role))
	b = append(b, `,"content":`...)
	b = AppendString(b, str(content))
	b = append(b, `,"timestamp":`...)
	b = AppendFloat(b, time)
	return append(b, `,"metadata":`...)
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
// as AppendValue sorts them. The log writes keys in order; a map whose
// keys are not is written again, sorted, and a key twice (which the
// decoder would have kept once) is left to the decoder.
func appendMap(b, m []byte, n, depth int) (_, rest []byte, ok bool) {
	start, rest := len(b), m
	b = append(b, '{')
	var prev []byte
	for i := range n {
		k, after, err := record.ReadToken(rest)
		if err != nil || k.Kind != record.KindString {
			return b, nil, false
		}
		if i > 0 {
			if bytes.Compare(prev, k.Str) >= 0 {
				return appendSorted(b[:start], m, n, depth)
			}
			b = append(b, ',')
		}
		prev = k.Str
		b = AppendString(b, str(k.Str))
		b = append(b, ':')
		if b, rest, ok = appendItem(b, after, depth+1); !ok {
			return b, nil, false
		}
	}
	return append(b, '}'), rest, true
}

// appendSorted is appendMap for keys out of order: it finds every
// value's extent first, to write them by key.
func appendSorted(b, m []byte, n, depth int) (_, rest []byte, ok bool) {
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
