package record

import (
	"encoding/binary"
	"errors"
	"math"
)

// Replays send stored entries to clients as they are, without decoding
// them into Go values first: a View is an entry's fields pointing into its
// stored bytes, and ReadToken walks its metadata one msgpack item at a
// time. Both understand only the forms the log itself writes; on anything
// else they return ErrNotPlain and the caller decodes the entry
// (DecodeEntry), which reads every form.

// ErrNotPlain: the bytes use a form the views do not read (an extension
// type, binary data, a key that is not a string, a field the
// log does not write); DecodeEntry reads them.
var ErrNotPlain = errors.New("record: entry needs the full decoder")

// RawEntry is an entry as the log stores it: its msgpack bytes, and the
// seq the log stored them under (which the bytes say too).
type RawEntry struct {
	Seq   uint64
	Bytes []byte
}

// Size is roughly what the entry costs on the wire, for byte budgets (as
// Entry.Size).
func (r *RawEntry) Size() int { return 64 + len(r.Bytes) }

// Decode decodes the entry.
func (r *RawEntry) Decode() (Entry, error) { return DecodeEntry(r.Bytes) }

// View is a stored entry's fields, pointing into its bytes (valid while
// they are). Meta is the metadata's msgpack map, nil when it has none.
type View struct {
	Seq           uint64
	Role, Content []byte
	Time          float64
	Meta          []byte
	Epoch         uint64
}

// ViewEntry reads the fields of a stored entry in the form the log writes
// it, without copying or allocating.
func ViewEntry(b []byte) (View, error) {
	var v View
	n, b, err := fastMapLen(b)
	if err != nil {
		return View{}, ErrNotPlain
	}
	for range n {
		var kb []byte
		if kb, b, err = fastBytes(b); err != nil || len(kb) != 1 {
			return View{}, ErrNotPlain
		}
		if b, err = v.read(kb[0], b); err != nil {
			return View{}, ErrNotPlain
		}
	}
	if len(b) != 0 || v.Seq == 0 {
		return View{}, ErrNotPlain
	}
	return v, nil
}

// ViewHead reads the fields a stored entry starts with as the log writes
// it (q, r, c and t, in that order) and nothing after them: rest holds
// the n pairs that follow (its metadata, its epoch), for a caller that
// reads them as it goes. ok is false for an entry that starts otherwise;
// ViewEntry reads its fields in any order.
func ViewHead(b []byte) (v View, n int, rest []byte, ok bool) {
	n, b, err := fastMapLen(b)
	if err != nil || n < 4 {
		return View{}, 0, nil, false
	}
	for _, key := range [...]byte{'q', 'r', 'c', 't'} {
		var kb []byte
		if kb, b, err = fastBytes(b); err != nil || len(kb) != 1 || kb[0] != key {
			return View{}, 0, nil, false
		}
		if b, err = v.read(key, b); err != nil {
			return View{}, 0, nil, false
		}
	}
	if v.Seq == 0 {
		return View{}, 0, nil, false
	}
	return v, n - 4, b, true
}

// read reads the value of field key from the start of b into v and
// returns what follows it.
func (v *View) read(key byte, b []byte) (_ []byte, err error) {
	switch key {
	case 'q':
		v.Seq, b, err = fastUint(b)
	case 'e':
		v.Epoch, b, err = fastUint(b)
	case 'r':
		v.Role, b, err = fastBytes(b)
	case 'c':
		v.Content, b, err = fastBytes(b)
	case 't':
		if len(b) < 9 || b[0] != 0xcb {
			return nil, ErrNotPlain
		}
		v.Time, b = math.Float64frombits(binary.BigEndian.Uint64(b[1:9])), b[9:]
	case 'm':
		if len(b) > 0 && b[0] == 0xc0 {
			v.Meta = nil
			return b[1:], nil
		}
		start := b
		if !StartsMap(b) {
			return nil, ErrNotPlain
		}
		if b, err = SkipValue(b, 1); err == nil {
			v.Meta = start[:len(start)-len(b)]
		}
	default:
		return nil, ErrNotPlain
	}
	return b, err
}

// Kind is the kind of one msgpack item.
type Kind uint8

// The kinds ReadToken reads.
const (
	KindNil Kind = iota
	KindBool
	KindInt     // Int holds it
	KindUint    // Uint holds it
	KindFloat   // a float64
	KindFloat32 // Float holds it, widened
	KindString
	KindArray // N elements follow
	KindMap   // N key/value pairs follow
)

// Token is one msgpack item as ReadToken reads it.
type Token struct {
	Kind  Kind
	Bool  bool
	Int   int64
	Uint  uint64
	Float float64
	Str   []byte // not copied
	N     int    // of an array or a map
}

// ReadToken reads one item from b: a scalar, or the header of an array or
// a map (whose N items follow). Lengths are checked against the bytes
// there; nesting is the caller's to bound.
func ReadToken(b []byte) (Token, []byte, error) {
	if len(b) == 0 {
		return Token{}, nil, ErrNotPlain
	}
	c := b[0]
	switch {
	case c <= 0x7f:
		return Token{Kind: KindUint, Uint: uint64(c)}, b[1:], nil
	case c >= 0xe0:
		return Token{Kind: KindInt, Int: int64(int8(c))}, b[1:], nil
	case c >= 0xa0 && c <= 0xbf, c >= 0xd9 && c <= 0xdb:
		s, rest, err := fastBytes(b)
		if err != nil {
			return Token{}, nil, ErrNotPlain
		}
		return Token{Kind: KindString, Str: s}, rest, nil
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		n, rest, ok := mapLen(b)
		if !ok {
			return Token{}, nil, ErrNotPlain
		}
		return Token{Kind: KindMap, N: n}, rest, nil
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		n, rest, ok := arrayLen(b)
		if !ok {
			return Token{}, nil, ErrNotPlain
		}
		return Token{Kind: KindArray, N: n}, rest, nil
	case c == 0xc0:
		return Token{Kind: KindNil}, b[1:], nil
	case c == 0xc2, c == 0xc3:
		return Token{Kind: KindBool, Bool: c == 0xc3}, b[1:], nil
	}
	c, u, rest, ok := sizedNumber(b)
	if !ok {
		return Token{}, nil, ErrNotPlain
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		return Token{Kind: KindUint, Uint: u}, rest, nil
	case 0xcb:
		return Token{Kind: KindFloat, Float: math.Float64frombits(u)}, rest, nil
	case 0xca:
		return Token{Kind: KindFloat32, Float: float64(math.Float32frombits(uint32(u)))}, rest, nil
	}
	shift := 64 - 8*(len(b)-len(rest)-1) // sign-extend the big-endian integer
	return Token{Kind: KindInt, Int: int64(u<<shift) >> shift}, rest, nil
}

// StartsMap reports whether b starts with a map's header.
func StartsMap(b []byte) bool {
	return len(b) > 0 && (b[0] >= 0x80 && b[0] <= 0x8f || b[0] == 0xde || b[0] == 0xdf)
}

// mapLen reads a map header whose pairs can fit in the bytes after it.
func mapLen(b []byte) (n int, rest []byte, ok bool) {
	n, rest, err := fastMapLen(b)
	if err != nil || n > len(rest)/2 { // a pair takes two bytes at least
		return 0, nil, false
	}
	return n, rest, true
}

// arrayLen reads an array header whose elements can fit in the bytes
// after it.
func arrayLen(b []byte) (n int, rest []byte, ok bool) {
	c := b[0]
	n, rest = int(c&0x0f), b[1:]
	switch {
	case c == 0xdc && len(b) >= 3:
		n, rest = int(binary.BigEndian.Uint16(b[1:3])), b[3:]
	case c == 0xdd && len(b) >= 5:
		n, rest = int(binary.BigEndian.Uint32(b[1:5])), b[5:]
	case c == 0xdc, c == 0xdd:
		return 0, nil, false
	}
	if n < 0 || n > len(rest) { // an element takes a byte at least
		return 0, nil, false
	}
	return n, rest, true
}

// SkipValue skips one item (with everything nested in it) of the forms
// ReadToken reads; depth is how deeply it is nested, at most MaxReadDepth.
// It reads only what it must to find the item's end (a replay checks
// every entry's metadata with it).
func SkipValue(b []byte, depth int) ([]byte, error) {
	if depth > MaxReadDepth || len(b) == 0 {
		return nil, ErrNotPlain
	}
	var n int // items nested in this one
	switch c := b[0]; {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return b[1:], nil
	case c >= 0xa0 && c <= 0xbf, c >= 0xd9 && c <= 0xdb:
		_, rest, err := fastBytes(b)
		if err != nil {
			return nil, ErrNotPlain
		}
		return rest, nil
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		pairs, rest, ok := mapLen(b)
		if !ok {
			return nil, ErrNotPlain
		}
		n, b = 2*pairs, rest
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		elems, rest, ok := arrayLen(b)
		if !ok {
			return nil, ErrNotPlain
		}
		n, b = elems, rest
	default:
		_, _, rest, ok := sizedNumber(b)
		if !ok {
			return nil, ErrNotPlain
		}
		return rest, nil
	}
	var err error
	for range n {
		if b, err = SkipValue(b, depth+1); err != nil {
			return nil, err
		}
	}
	return b, nil
}
