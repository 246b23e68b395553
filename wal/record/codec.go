package record

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeEntry decodes one stored entry. It is exported for the fuzz target
// and for tools that read a log; it never panics on bad input.
func DecodeEntry(b []byte) (Entry, error) {
	e, err := decodeEntry(b)
	if err != nil {
		return Entry{}, err
	}
	if e.Seq == 0 {
		return Entry{}, errors.New("entry without seq")
	}
	return e, nil
}

// EncodeEntry is DecodeEntry's inverse.
func EncodeEntry(e Entry) ([]byte, error) { return msgpack.Marshal(e) }

// DecodeHeader decodes a stored header; exported for tools and tests.
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if err := checkMsgpack(b); err != nil {
		return Header{}, err
	}
	if err := msgpack.Unmarshal(b, &h); err != nil {
		return Header{}, err
	}
	return h, nil
}

// Unmarshal decodes msgpack bytes read from the log into v after checking
// that every length in them fits the bytes that are there, so corrupt
// bytes can never make the decoder allocate more than they hold. Package
// actor uses it for the state and context it keeps in the log.
func Unmarshal(b []byte, v any) error {
	if err := checkMsgpack(b); err != nil {
		return err
	}
	return msgpack.Unmarshal(b, v)
}

// EncodeMsgpack writes the entry as the map its msgpack tags describe,
// without reflection: entries are what the log writes and reads most.
func (e Entry) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 4
	if len(e.Metadata) > 0 {
		n++
	}
	if e.Epoch != 0 {
		n++
	}
	// One step after another, without a table of closures: those moved
	// the entry to the heap for every append.
	err := enc.EncodeMapLen(n)
	if err == nil {
		err = enc.EncodeString("q")
	}
	if err == nil {
		err = enc.EncodeUint(e.Seq)
	}
	if err == nil {
		err = encodeStrings(enc, "r", e.Role, "c", e.Content, "t")
	}
	if err == nil {
		err = enc.EncodeFloat64(e.Time)
	}
	if err == nil && len(e.Metadata) > 0 {
		if err = enc.EncodeString("m"); err == nil {
			// Keys in order, nested maps' too: a replay then writes the
			// metadata to JSON (whose keys are sorted) in one pass. The
			// flag stays on for whatever the encoder writes next, which
			// only orders it.
			enc.SetSortMapKeys(true)
			err = enc.EncodeMapSorted(e.Metadata)
		}
	}
	if err == nil && e.Epoch != 0 {
		if err = enc.EncodeString("e"); err == nil {
			err = enc.EncodeUint(e.Epoch)
		}
	}
	return err
}

// encodeStrings writes each string in turn.
func encodeStrings(enc *msgpack.Encoder, ss ...string) error {
	for _, s := range ss {
		if err := enc.EncodeString(s); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack reads what EncodeMsgpack (or the tag-driven encoding
// before it) wrote; unknown keys are skipped.
func (e *Entry) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	*e = Entry{}
	for range max(n, 0) {
		k, err := dec.DecodeString()
		if err != nil {
			return err
		}
		switch k {
		case "q":
			e.Seq, err = dec.DecodeUint64()
		case "r":
			e.Role, err = dec.DecodeString()
		case "c":
			e.Content, err = dec.DecodeString()
		case "t":
			e.Time, err = dec.DecodeFloat64()
		case "m":
			e.Metadata, err = dec.DecodeMap()
		case "e":
			e.Epoch, err = dec.DecodeUint64()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return fmt.Errorf("entry field %q: %w", k, err)
		}
	}
	return nil
}
