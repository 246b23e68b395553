package record

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// Entries are what the log reads most (a resume, a history page, an
// activation, a catch-up), and the msgpack decoder spends most of a read
// in its generic machinery. decodeEntryFast reads the forms the log itself
// writes straight from the bytes, producing exactly what msgpack's
// decoder would (the same Go types for metadata values: int8 for a fixint,
// uint64 for a uint64, and so on). On anything else (an extension type,
// binary data, a key that is not a string, an encoding it does not expect
// for a field) it gives up with errSlowPath and the msgpack decoder reads
// the entry instead; FuzzFastDecodeMatches holds the two to the same
// answers.

// errSlowPath: the fast decoder does not handle this input.
var errSlowPath = errors.New("wal: entry needs the msgpack decoder")

// decodeEntry decodes b. The fast decoder checks every length against
// the bytes that are there and bounds nesting itself; what it leaves goes
// through checkMsgpack before the msgpack decoder trusts any length.
func decodeEntry(b []byte) (Entry, error) {
	e, err := decodeEntryFast(b)
	if err == nil {
		return e, nil
	}
	if err := checkMsgpack(b); err != nil {
		return Entry{}, err
	}
	e = Entry{}
	if err := msgpack.Unmarshal(b, &e); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// common are the roles and metadata keys the actor writes: decoding one
// of them allocates nothing.
var common = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{"user", "agent", "tool", "system", "id", "reply_to", "call_id", "name",
		"status", "args", "result", "error", "sensitive", "started", "done", "step", "interrupted", "parts"} {
		m[s] = s
	}
	return m
}()

func decodeEntryFast(b []byte) (Entry, error) {
	v, err := ViewEntry(b)
	if err != nil {
		return Entry{}, errSlowPath
	}
	e := Entry{Seq: v.Seq, Epoch: v.Epoch, Role: commonString(v.Role), Content: string(v.Content), Time: v.Time}
	if v.Meta != nil {
		m, _, err := fastMap(v.Meta, 1)
		if err != nil {
			return Entry{}, err
		}
		e.Metadata = m.(map[string]any)
	}
	return e, nil
}

// sizedNumber reads a sized integer or float's marker c and its
// big-endian bits u (not sign-extended); ok is false for anything else.
func sizedNumber(b []byte) (c byte, u uint64, rest []byte, ok bool) {
	if len(b) == 0 {
		return 0, 0, nil, false
	}
	c = b[0]
	var size int
	switch c {
	case 0xcc, 0xd0:
		size = 1
	case 0xcd, 0xd1:
		size = 2
	case 0xce, 0xd2, 0xca:
		size = 4
	case 0xcf, 0xd3, 0xcb:
		size = 8
	}
	if size == 0 || len(b) < 1+size {
		return 0, 0, nil, false
	}
	for _, x := range b[1 : 1+size] {
		u = u<<8 | uint64(x)
	}
	return c, u, b[1+size:], true
}

// fastMapLen reads a map header.
func fastMapLen(b []byte) (int, []byte, error) {
	if len(b) == 0 {
		return 0, nil, errSlowPath
	}
	switch c := b[0]; {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), b[1:], nil
	case c == 0xde && len(b) >= 3:
		return int(binary.BigEndian.Uint16(b[1:3])), b[3:], nil
	case c == 0xdf && len(b) >= 5:
		return int(binary.BigEndian.Uint32(b[1:5])), b[5:], nil
	}
	return 0, nil, errSlowPath
}

// fastString reads a str value.
func fastString(b []byte) (string, []byte, error) {
	p, b, err := fastBytes(b)
	return string(p), b, err
}

// fastCommon reads a str value that is most often one of common.
func fastCommon(b []byte) (string, []byte, error) {
	p, b, err := fastBytes(b)
	return commonString(p), b, err
}

// commonString is p as a string, without allocating when it is one of
// common.
func commonString(p []byte) string {
	if s, ok := common[string(p)]; ok {
		return s
	}
	return string(p)
}

// fastBytes reads a str value's bytes (not copied).
func fastBytes(b []byte) ([]byte, []byte, error) {
	if len(b) == 0 {
		return nil, nil, errSlowPath
	}
	var n, h int
	switch c := b[0]; {
	case c >= 0xa0 && c <= 0xbf:
		n, h = int(c&0x1f), 1
	case c == 0xd9 && len(b) >= 2:
		n, h = int(b[1]), 2
	case c == 0xda && len(b) >= 3:
		n, h = int(binary.BigEndian.Uint16(b[1:3])), 3
	case c == 0xdb && len(b) >= 5:
		n, h = int(binary.BigEndian.Uint32(b[1:5])), 5
	default:
		return nil, nil, errSlowPath
	}
	if n < 0 || len(b)-h < n {
		return nil, nil, errSlowPath
	}
	return b[h : h+n], b[h+n:], nil
}

// fastUint reads an unsigned integer field (Seq, Epoch) in the encodings
// the log writes.
func fastUint(b []byte) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, nil, errSlowPath
	}
	switch c := b[0]; {
	case c <= 0x7f:
		return uint64(c), b[1:], nil
	case c == 0xcc && len(b) >= 2:
		return uint64(b[1]), b[2:], nil
	case c == 0xcd && len(b) >= 3:
		return uint64(binary.BigEndian.Uint16(b[1:3])), b[3:], nil
	case c == 0xce && len(b) >= 5:
		return uint64(binary.BigEndian.Uint32(b[1:5])), b[5:], nil
	case c == 0xcf && len(b) >= 9:
		return binary.BigEndian.Uint64(b[1:9]), b[9:], nil
	}
	return 0, nil, errSlowPath
}

// fastValue reads one metadata value as msgpack's DecodeInterface does;
// depth is how deeply it is nested.
func fastValue(b []byte, depth int) (any, []byte, error) {
	if len(b) == 0 || depth > MaxReadDepth {
		return nil, nil, errSlowPath
	}
	c := b[0]
	switch {
	case c <= 0x7f || c >= 0xe0: // fixint
		return int8(c), b[1:], nil
	case c >= 0xa0 && c <= 0xbf, c >= 0xd9 && c <= 0xdb:
		return fastString(b)
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		return fastMap(b, depth)
	case c >= 0x90 && c <= 0x9f:
		return fastArray(int(c&0x0f), b[1:], depth)
	case c == 0xdc && len(b) >= 3:
		return fastArray(int(binary.BigEndian.Uint16(b[1:3])), b[3:], depth)
	case c == 0xdd && len(b) >= 5:
		return fastArray(int(binary.BigEndian.Uint32(b[1:5])), b[5:], depth)
	}
	switch c {
	case 0xc0:
		return nil, b[1:], nil
	case 0xc2, 0xc3:
		return c == 0xc3, b[1:], nil
	}
	return fastNumber(b)
}

// fastNumber reads a sized integer or a float, as the Go type msgpack's
// DecodeInterface gives it.
func fastNumber(b []byte) (any, []byte, error) {
	c, u, rest, ok := sizedNumber(b)
	if !ok {
		return nil, nil, errSlowPath
	}
	switch c {
	case 0xcc:
		return uint8(u), rest, nil
	case 0xcd:
		return uint16(u), rest, nil
	case 0xce:
		return uint32(u), rest, nil
	case 0xcf:
		return u, rest, nil
	case 0xd0:
		return int8(u), rest, nil
	case 0xd1:
		return int16(u), rest, nil
	case 0xd2:
		return int32(u), rest, nil
	case 0xd3:
		return int64(u), rest, nil
	case 0xca:
		return math.Float32frombits(uint32(u)), rest, nil
	default: // 0xcb
		return math.Float64frombits(u), rest, nil
	}
}

func fastMap(b []byte, depth int) (any, []byte, error) {
	n, b, err := fastMapLen(b)
	if err != nil {
		return nil, nil, err
	}
	if n > len(b)/2 { // each pair takes two bytes at least
		return nil, nil, errSlowPath
	}
	m := make(map[string]any, n)
	for range n {
		var k string
		var v any
		if k, b, err = fastCommon(b); err != nil {
			return nil, nil, err
		}
		if v, b, err = fastValue(b, depth+1); err != nil {
			return nil, nil, err
		}
		m[k] = v
	}
	return m, b, nil
}

func fastArray(n int, b []byte, depth int) (any, []byte, error) {
	if n > len(b) { // each element takes a byte at least
		return nil, nil, errSlowPath
	}
	s := make([]any, 0, n)
	for range n {
		var v any
		var err error
		if v, b, err = fastValue(b, depth+1); err != nil {
			return nil, nil, err
		}
		s = append(s, v)
	}
	return s, b, nil
}
