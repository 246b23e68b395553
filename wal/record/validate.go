package record

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxReadDepth bounds how deeply stored maps and arrays may nest: deeper
// bytes are refused as corrupt before the decoder sees them.
const MaxReadDepth = 64

// checkMsgpack walks one msgpack value without allocating and checks that
// every length and element count fits in the bytes that are actually
// there. The msgpack decoder trusts such headers and allocates what they
// claim, so 8 corrupt bytes could otherwise ask for gigabytes and kill the
// process; after this check its allocations are bounded by the input size.
func checkMsgpack(b []byte) error {
	rest, err := skipValue(b, 0)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("msgpack: %d trailing bytes", len(rest))
	}
	return nil
}

var errTruncated = errors.New("msgpack: truncated value")

// skipValue returns b after the value at its start.
func skipValue(b []byte, depth int) ([]byte, error) {
	if len(b) == 0 {
		return nil, errTruncated
	}
	if depth > MaxReadDepth {
		return nil, errors.New("msgpack: nested too deeply")
	}
	c, b := b[0], b[1:]
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		return b, nil
	case c >= 0x80 && c <= 0x8f:
		return skipItems(b, 2*int(c&0x0f), depth)
	case c >= 0x90 && c <= 0x9f:
		return skipItems(b, int(c&0x0f), depth)
	case c >= 0xa0 && c <= 0xbf:
		return skipBytes(b, int(c&0x1f))
	}
	switch c {
	case 0xcc, 0xd0:
		return skipBytes(b, 1)
	case 0xcd, 0xd1:
		return skipBytes(b, 2)
	case 0xca, 0xce, 0xd2:
		return skipBytes(b, 4)
	case 0xcb, 0xcf, 0xd3:
		return skipBytes(b, 8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1..16, plus a type byte
		return skipBytes(b, 1+1<<(c-0xd4))
	case 0xc4, 0xd9: // bin8, str8
		return skipSized(b, 1, 0)
	case 0xc5, 0xda:
		return skipSized(b, 2, 0)
	case 0xc6, 0xdb:
		return skipSized(b, 4, 0)
	case 0xc7, 0xc8, 0xc9: // ext8/16/32: length, then a type byte
		return skipSized(b, 1<<(c-0xc7), 1)
	case 0xdc, 0xdd, 0xde, 0xdf: // array16/32, map16/32
		width := 2
		if c == 0xdd || c == 0xdf {
			width = 4
		}
		n, b, err := readLen(b, width)
		if err != nil {
			return nil, err
		}
		if c >= 0xde {
			n *= 2
		}
		return skipItems(b, n, depth)
	}
	return nil, fmt.Errorf("msgpack: invalid byte 0x%02x", c)
}

func readLen(b []byte, width int) (int, []byte, error) {
	if len(b) < width {
		return 0, nil, errTruncated
	}
	var n uint64
	switch width {
	case 1:
		n = uint64(b[0])
	case 2:
		n = uint64(binary.BigEndian.Uint16(b))
	case 4:
		n = uint64(binary.BigEndian.Uint32(b))
	}
	if n > uint64(len(b)) {
		return 0, nil, errTruncated
	}
	return int(n), b[width:], nil
}

func skipSized(b []byte, width, extra int) ([]byte, error) {
	n, b, err := readLen(b, width)
	if err != nil {
		return nil, err
	}
	return skipBytes(b, n+extra)
}

func skipBytes(b []byte, n int) ([]byte, error) {
	if n > len(b) {
		return nil, errTruncated
	}
	return b[n:], nil
}

// skipItems skips n values; each takes at least one byte, so a count
// larger than what is left is refused before anything is walked.
func skipItems(b []byte, n, depth int) ([]byte, error) {
	if n > len(b) {
		return nil, errTruncated
	}
	var err error
	for range n {
		if b, err = skipValue(b, depth+1); err != nil {
			return nil, err
		}
	}
	return b, nil
}
