package flatjson

import (
	"unicode/utf8"

	"github.com/tether-dev/tether/gateway/wire"
)

// Decode decodes data if it is a flat frame (see the package doc), with
// every field it found set: keeping only the fields of the frame's type
// is the caller's (the gateway's one field picker).
func Decode(data []byte) (wire.ClientFrame, bool) {
	var v wire.ClientFrame
	p := flatParser{b: data}
	if !p.byte('{') {
		return v, false
	}
	var seen uint8
	for first := true; ; first = false {
		if p.byte('}') {
			break
		}
		if !first && !p.byte(',') {
			return v, false
		}
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return v, false
		}
		dst, bit := flatField(&v, key)
		if dst == nil || seen&bit != 0 {
			return v, false
		}
		seen |= bit
		switch dst := dst.(type) {
		case *string:
			if *dst, ok = p.strValue(); !ok {
				return v, false
			}
		case *uint64:
			if *dst, ok = p.uint(); !ok {
				return v, false
			}
		case *int:
			n, ok := p.uint()
			if !ok || n > 1<<31-1 {
				return v, false
			}
			*dst = int(n)
		}
	}
	p.space()
	if p.i != len(p.b) || v.Type == "" {
		return v, false
	}
	return v, true
}

// flatField returns where the value of key goes, and a bit of its own
// (to refuse a key given twice); nil for a key Decode does not take.
func flatField(v *wire.ClientFrame, key []byte) (any, uint8) {
	switch string(key) {
	case "type":
		return &v.Type, 1 << 0
	case "id":
		return &v.ID, 1 << 1
	case "content":
		return &v.Content, 1 << 2
	case "token":
		return &v.Token, 1 << 3
	case "session_id":
		return &v.SessionID, 1 << 4
	case "last_seq":
		return &v.LastSeq, 1 << 5
	case "before_seq":
		return &v.BeforeSeq, 1 << 6
	case "limit":
		return &v.Limit, 1 << 7
	}
	return nil, 0
}

// flatParser reads JSON tokens from b at i.
type flatParser struct {
	b []byte
	i int
}

func (p *flatParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte takes c (after any space) if it comes next.
func (p *flatParser) byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str takes a string without escapes and returns its bytes (a view).
func (p *flatParser) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

func (p *flatParser) strValue() (string, bool) {
	s, ok := p.str()
	return string(s), ok
}

// uint takes an unsigned integer without sign, fraction, exponent or
// leading zero, that fits in 64 bits.
func (p *flatParser) uint() (uint64, bool) {
	p.space()
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		d := uint64(p.b[p.i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
		p.i++
	}
	digits := p.i - start
	if digits == 0 || (digits > 1 && p.b[start] == '0') {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return n, true
}
