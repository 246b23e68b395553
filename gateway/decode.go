package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/tether-dev/tether/gateway/internal/flatjson"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/wal"
)

// ErrInvalidPayload is a frame that is not UTF-8 or not JSON (close 1007).
var ErrInvalidPayload = errors.New("frame is not valid UTF-8 JSON")

// DecodeFrame decodes one client text frame. It reads the type first, then
// only that type's own fields: fields of other frame types are unknown
// fields here, and unknown fields are ignored whatever their JSON type.
// Errors other than ErrInvalidPayload describe a frame that is JSON but
// not a valid frame (bad_request), including a metadata or context value
// the log could not store and read back (wal.CheckValue).
//
// There is one decoder path with two speeds: a valid frame is decoded in
// one pass (flatjson for flat frames, encoding/json for the rest) and
// anything that pass refuses is decoded again by decodeSlow, which says
// what is wrong. Both keep a type's fields through the one table,
// ownFields.
func DecodeFrame(data []byte) (wire.ClientFrame, error) {
	var f wire.ClientFrame
	if !utf8.Valid(data) {
		return f, fmt.Errorf("%w: not UTF-8", ErrInvalidPayload)
	}
	if f, ok := decodeOnce(data); ok {
		return f, nil
	}
	return decodeSlow(data)
}

// field is one of the frames' fields, by its place in fields.
type field uint8

const (
	fToken field = iota
	fSessionID
	fLastSeq
	fStream
	fAttach
	fID
	fContent
	fMetadata
	fInterrupt
	fBeforeSeq
	fLimit
	fSet
	fReplyTo
	fCallID
	fApproved
)

// fields holds each field's JSON name and what a client must send there.
var fields = [...]struct{ name, want string }{
	fToken:     {"token", wantString},
	fSessionID: {"session_id", wantString},
	fLastSeq:   {"last_seq", wantUint},
	fStream:    {"stream", wantObject},
	fAttach:    {"attach", wantString},
	fID:        {"id", wantString},
	fContent:   {"content", wantString},
	fMetadata:  {"metadata", wantObject},
	fInterrupt: {"interrupt", wantBool},
	fBeforeSeq: {"before_seq", wantUint},
	fLimit:     {"limit", wantInt},
	fSet:       {"set", wantObject},
	fReplyTo:   {"reply_to", wantUint},
	fCallID:    {"call_id", wantString},
	fApproved:  {"approved", wantBool},
}

const (
	wantString = "a string"
	wantUint   = "a non-negative integer"
	wantInt    = "an integer"
	wantBool   = "true or false"
	wantObject = "an object"
)

// ownFields is the one field picker: each frame type's own fields. A type
// not here has none beyond its type.
var ownFields = map[string][]field{
	wire.TypeHello:   {fToken, fSessionID, fLastSeq, fStream, fAttach},
	wire.TypeSend:    {fID, fContent, fMetadata, fInterrupt},
	wire.TypeHistory: {fBeforeSeq, fLimit},
	wire.TypeContext: {fSet},
	wire.TypePing:    {fID},
	wire.TypeCancel:  {fReplyTo},
	wire.TypeApprove: {fCallID, fApproved},
}

// addr is where fl lives in f. It is a switch, not a table of closures,
// so that a frame decoded on the stack stays there.
func (fl field) addr(f *wire.ClientFrame) any {
	switch fl {
	case fToken:
		return &f.Token
	case fSessionID:
		return &f.SessionID
	case fLastSeq:
		return &f.LastSeq
	case fStream:
		return &f.Stream
	case fAttach:
		return &f.Attach
	case fID:
		return &f.ID
	case fContent:
		return &f.Content
	case fMetadata:
		return &f.Metadata
	case fInterrupt:
		return &f.Interrupt
	case fBeforeSeq:
		return &f.BeforeSeq
	case fLimit:
		return &f.Limit
	case fSet:
		return &f.Set
	case fReplyTo:
		return &f.ReplyTo
	case fCallID:
		return &f.CallID
	case fApproved:
		return &f.Approved
	}
	panic(fmt.Sprintf("gateway: no field %d", fl))
}

// copy sets fl of dst to its value in src: addr's switch again, as
// plain assignments, because this is every valid frame's path
// (TestFieldCopyMatchesAddr holds the two equal).
func (fl field) copy(dst, src *wire.ClientFrame) {
	switch fl {
	case fToken:
		dst.Token = src.Token
	case fSessionID:
		dst.SessionID = src.SessionID
	case fLastSeq:
		dst.LastSeq = src.LastSeq
	case fStream:
		dst.Stream = src.Stream
	case fAttach:
		dst.Attach = src.Attach
	case fID:
		dst.ID = src.ID
	case fContent:
		dst.Content = src.Content
	case fMetadata:
		dst.Metadata = src.Metadata
	case fInterrupt:
		dst.Interrupt = src.Interrupt
	case fBeforeSeq:
		dst.BeforeSeq = src.BeforeSeq
	case fLimit:
		dst.Limit = src.Limit
	case fSet:
		dst.Set = src.Set
	case fReplyTo:
		dst.ReplyTo = src.ReplyTo
	case fCallID:
		dst.CallID = src.CallID
	case fApproved:
		dst.Approved = src.Approved
	default:
		panic(fmt.Sprintf("gateway: no field %d", fl))
	}
}

// decodeOnce decodes a frame in one pass, for the common case of a valid
// frame (the two passes of decodeSlow cost twice the JSON scanning). It
// reports false for anything decodeSlow must look at more closely: an
// error, no type, or values that cannot be stored.
func decodeOnce(data []byte) (wire.ClientFrame, bool) {
	if v, ok := flatjson.Decode(data); ok {
		return pick(v)
	}
	return decodeJSON(data)
}

// decodeJSON is decodeOnce through encoding/json, in a function of its
// own so that only frames that need it put a frame on the heap.
func decodeJSON(data []byte) (wire.ClientFrame, bool) {
	var v wire.ClientFrame // every type's fields: pick keeps only v.Type's
	if err := json.Unmarshal(data, &v); err != nil {
		return wire.ClientFrame{}, false
	}
	return pick(v)
}

// pick keeps the own fields of v's type, and reports false when v has no
// type or a value there cannot be stored.
func pick(v wire.ClientFrame) (wire.ClientFrame, bool) {
	if v.Type == "" {
		return wire.ClientFrame{}, false
	}
	f := wire.ClientFrame{Type: v.Type}
	for _, fl := range ownFields[v.Type] {
		fl.copy(&f, &v)
	}
	return f, storableFrame(f) == nil
}

// decodeSlow decodes a frame in two steps, its type and then that type's
// own fields in the order the frame gives them, so that what is wrong is
// said the same way whatever else the frame holds (a field of another
// type, with a value that type would refuse, is ignored). Keys match a
// field as encoding/json matches them (the exact name, else the name in
// any case) and a repeated key's last value wins, so that it decodes what
// decodeOnce decodes (FuzzDecodeOnceMatches).
func decodeSlow(data []byte) (wire.ClientFrame, error) {
	var f wire.ClientFrame
	var head struct {
		Type string `json:"type"`
	}
	// Unmarshal checks the whole frame is JSON before it decodes anything:
	// a syntax error is a frame that is not JSON (1007), no separate pass.
	if err := json.Unmarshal(data, &head); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return f, fmt.Errorf("%w: not JSON", ErrInvalidPayload)
		}
		return f, fmt.Errorf("malformed client frame: %v", err)
	}
	if head.Type == "" {
		return f, errors.New("frame has no type")
	}
	f.Type = head.Type
	if err := decodeOwn(data, &f); err != nil {
		return f, fmt.Errorf("malformed %s frame: %w", f.Type, err)
	}
	return f, storableFrame(f)
}

// decodeOwn reads f.Type's own fields from data, a JSON object.
func decodeOwn(data []byte, f *wire.ClientFrame) error {
	own := ownFields[f.Type]
	if len(own) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // the object's '{'
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		fl, ok := match(own, key)
		if !ok {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
			continue
		}
		if err := dec.Decode(fl.addr(f)); err != nil {
			return fl.explain(err)
		}
	}
	return nil
}

// explain says what is wrong with a value the field could not take: the
// field itself of the wrong JSON type, or something inside it (a field of
// the stream mark, a number too large for a float64 in metadata).
func (fl field) explain(err error) error {
	name := fields[fl].name
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%q: %w", name, err)
	}
	typ := reflect.TypeOf(fl.addr(&wire.ClientFrame{})).Elem()
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if te.Field == "" && te.Type == typ {
		return fmt.Errorf("%q is %s, want %s", name, te.Value, fields[fl].want)
	}
	path := name
	if te.Field != "" {
		path += "." + te.Field
	}
	return fmt.Errorf("%q holds %s where a %s is wanted", path, te.Value, te.Type)
}

// match finds key's field as encoding/json would: by its exact name, else
// case-insensitively.
func match(own []field, key string) (field, bool) {
	for _, fl := range own {
		if fields[fl].name == key {
			return fl, true
		}
	}
	for _, fl := range own {
		if strings.EqualFold(fields[fl].name, key) {
			return fl, true
		}
	}
	return 0, false
}

// storableFrame applies the log's rule for client values (wal.CheckValue)
// at the door, so nothing stored is ever unreadable. Only a send's
// metadata and a context's set hold client values, and a frame holds no
// field of another type.
func storableFrame(f wire.ClientFrame) error {
	if err := storable("metadata", f.Metadata); err != nil {
		return err
	}
	return storable("context", f.Set)
}

func storable(what string, v map[string]any) error {
	if v == nil {
		return nil
	}
	if err := wal.CheckValue(v); err != nil {
		return fmt.Errorf("%s cannot be stored: %w", what, err)
	}
	return nil
}
