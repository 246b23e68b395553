package jsonenc

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/wal/record"
)

// AppendMessage writes e as a message frame (typ "message") or as an
// element of a history_batch (typ "").
func AppendMessage(b []byte, e *record.Entry, typ string) []byte {
	b = append(b, '{')
	if typ != "" {
		b = append(b, `"type":`...)
		b = AppendString(b, typ)
		b = append(b, ',')
	}
	b = append(b, `"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"role":`...)
	b = AppendString(b, e.Role)
	b = append(b, `,"content":`...)
	b = AppendString(b, e.Content)
	b = append(b, `,"timestamp":`...)
	b = AppendFloat(b, e.Time)
	b = append(b, `,"metadata":`...)
	if e.Metadata == nil {
		b = append(b, "{}"...)
	} else {
		b = AppendValue(b, e.Metadata)
	}
	return append(b, '}')
}

// AppendAck writes an ack frame: send id was stored as entry seq.
func AppendAck(b []byte, id string, seq uint64) []byte {
	b = append(b, `{"type":"ack","id":`...)
	b = AppendString(b, id)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	return append(b, '}')
}

// AppendDelta writes a delta frame: text of the reply that will be entry
// d.Seq, its parts d.From..d.Part.
func AppendDelta(b []byte, d wire.Delta) []byte {
	b = append(b, `{"type":"delta","seq":`...)
	b = strconv.AppendUint(b, d.Seq, 10)
	b = append(b, `,"part":`...)
	b = strconv.AppendInt(b, int64(d.Part), 10)
	if d.From != nil {
		b = append(b, `,"from":`...)
		b = strconv.AppendInt(b, int64(*d.From), 10)
	}
	b = append(b, `,"text":`...)
	b = AppendString(b, d.Text)
	return append(b, '}')
}

// AppendBatch writes a history_batch frame: the entries stored (as the
// log stores them, oldest first), then msgs, with the count of older
// entries left out and, when there is one, a summary of them. It fails
// only on a stored entry no decoder reads.
func AppendBatch(b []byte, stored []record.RawEntry, msgs []record.Entry, omitted uint64, summary string) ([]byte, error) {
	b = append(b, `{"type":"history_batch","messages":[`...)
	for i := range stored {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = AppendStored(b, stored[i].Bytes); !ok {
			e, err := stored[i].Decode()
			if err != nil {
				return b, fmt.Errorf("entry %d: %w", stored[i].Seq, err)
			}
			b = AppendMessage(b, &e, "")
		}
	}
	for i := range msgs {
		if i > 0 || len(stored) > 0 {
			b = append(b, ',')
		}
		b = AppendMessage(b, &msgs[i], "")
	}
	var first, last uint64
	switch {
	case len(stored) > 0:
		first = stored[0].Seq
	case len(msgs) > 0:
		first = msgs[0].Seq
	}
	switch {
	case len(msgs) > 0:
		last = msgs[len(msgs)-1].Seq
	case len(stored) > 0:
		last = stored[len(stored)-1].Seq
	}
	b = append(b, `],"first_seq":`...)
	b = strconv.AppendUint(b, first, 10)
	b = append(b, `,"last_seq":`...)
	b = strconv.AppendUint(b, last, 10)
	b = append(b, `,"omitted":`...)
	b = strconv.AppendUint(b, omitted, 10)
	b = append(b, `,"summary":`...)
	if summary == "" {
		b = append(b, "null"...)
	} else {
		b = AppendString(b, summary)
	}
	return append(b, '}'), nil
}

// AppendValue writes a value decoded from JSON or msgpack; what has no
// fast path goes through encoding/json.
func AppendValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case string:
		return AppendString(b, v)
	case bool:
		return strconv.AppendBool(b, v)
	case float64:
		return AppendFloat(b, v)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case uint64:
		return strconv.AppendUint(b, v, 10)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case int8:
		return strconv.AppendInt(b, int64(v), 10)
	case int16:
		return strconv.AppendInt(b, int64(v), 10)
	case int32:
		return strconv.AppendInt(b, int64(v), 10)
	case uint8:
		return strconv.AppendUint(b, uint64(v), 10)
	case uint16:
		return strconv.AppendUint(b, uint64(v), 10)
	case uint32:
		return strconv.AppendUint(b, uint64(v), 10)
	case map[string]any:
		var small [8]string // most metadata maps: no allocation for the keys
		keys := small[:0]
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendString(b, k)
			b = append(b, ':')
			b = AppendValue(b, v[k])
		}
		return append(b, '}')
	case []any:
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendValue(b, x)
		}
		return append(b, ']')
	}
	j, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}

// AppendFloat writes f as encoding/json does (NaN and infinities, which
// JSON cannot hold, as null).
func AppendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// AppendString writes s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced, U+2028 and U+2029 escaped
// (as encoding/json does, so the frame is safe to evaluate as JavaScript).
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look of its own.
		for i+8 <= len(s) && !special(binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))) {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// special reports whether any of the eight bytes in x is one AppendString
// cannot copy as it is: below 0x20, a quote, a backslash, or not ASCII.
// (The tests for "below" and "zero" are exact for "any byte", which is
// all this asks.)
func special(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := func(v uint64, n uint64) uint64 { return (v - n*ones) & ^v & highs }
	return (x&highs | below(x, 0x20) | below(x^('"'*ones), 1) | below(x^('\\'*ones), 1)) != 0
}
