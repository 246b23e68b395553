package faultnet

import (
	"bytes"
	"encoding/binary"
)

// frameScanner follows one direction of a connection: the HTTP head, then
// WebSocket frames, reporting whether a chunk completed a close frame's
// header.
type frameScanner struct {
	upgraded bool
	head     []byte // unparsed bytes: HTTP head, or a partial frame header
	skip     uint64 // payload bytes of the current frame still to pass
}

func (f *frameScanner) feed(b []byte) (sawClose bool) {
	for len(b) > 0 {
		if !f.upgraded {
			f.head = append(f.head, b...)
			b = nil
			i := bytes.Index(f.head, []byte("\r\n\r\n"))
			if i < 0 {
				if len(f.head) > 64<<10 {
					f.head = nil // not HTTP as expected: stop looking
				}
				return sawClose
			}
			f.upgraded = true
			b = append([]byte(nil), f.head[i+4:]...)
			f.head = nil
			continue
		}
		if f.skip > 0 {
			n := min(uint64(len(b)), f.skip)
			f.skip -= n
			b = b[n:]
			continue
		}
		f.head = append(f.head, b...)
		b = nil
		sawClose = f.frames() || sawClose
	}
	return sawClose
}

// frames consumes the whole frames (and the header of a partial one) in
// head.
func (f *frameScanner) frames() (sawClose bool) {
	for len(f.head) >= 2 {
		h := f.head
		size, need := uint64(h[1]&0x7f), 2
		switch size {
		case 126:
			need += 2
		case 127:
			need += 8
		}
		if h[1]&0x80 != 0 {
			need += 4 // mask key
		}
		if len(h) < need {
			return sawClose
		}
		switch size {
		case 126:
			size = uint64(binary.BigEndian.Uint16(h[2:4]))
		case 127:
			size = binary.BigEndian.Uint64(h[2:10])
		}
		if h[0]&0x0f == 0x8 {
			sawClose = true
		}
		h = h[need:]
		if uint64(len(h)) >= size {
			f.head = append([]byte(nil), h[size:]...)
			continue
		}
		f.skip = size - uint64(len(h))
		f.head = nil
	}
	return sawClose
}
