package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Status is a session's place in its lifecycle.
type Status string

// The lifecycle of PROTOCOL.md: active → interrupted → active | expired;
// active → completed.
const (
	StatusActive      Status = "active"
	StatusInterrupted Status = "interrupted"
	StatusExpired     Status = "expired"
	StatusCompleted   Status = "completed"
)

// Terminal reports whether nothing can bring the session back.
func (s Status) Terminal() bool { return s == StatusExpired || s == StatusCompleted }

// Entry is one record of a session's log. Seq is strictly increasing and
// gap-free within a session, starting at 1. Epoch is the owner epoch the
// entry was written under (0 in logs written before epochs were kept per
// entry): a replica that holds entries of an older epoch than the owner
// shipping to it truncates them.
type Entry struct {
	Seq      uint64         `msgpack:"q"`
	Role     string         `msgpack:"r"`
	Content  string         `msgpack:"c"`
	Time     float64        `msgpack:"t"` // Unix seconds
	Metadata map[string]any `msgpack:"m,omitempty"`
	Epoch    uint64         `msgpack:"e,omitempty"`
}

// Size is roughly what the entry costs in memory and on the wire, for
// byte budgets.
func (e *Entry) Size() int {
	n := 64 + len(e.Role) + len(e.Content)
	if e.Metadata != nil {
		n += ValueSize(e.Metadata)
	}
	return n
}

// Header is the part of a session the store itself needs: who owns it,
// where it is in its lifecycle (for retention), its last seq and the owner
// epoch (for the writer fence). It holds only values the server makes, so
// no client input can make it unreadable; ownership is checked from it
// before any user data is decoded.
//
// State is the session actor's own state (pending tool call, turns owed),
// opaque to the store: package actor owns its schema. It is small and
// rewritten with every append that changes it (settle.go). The user and agent context are kept apart
// (SessionData.Context) and written only when they change.
type Header struct {
	SessionID     string    `msgpack:"id"`
	UserID        string    `msgpack:"u"`
	Status        Status    `msgpack:"st"`
	CreatedAt     time.Time `msgpack:"ca"`
	LastActiveAt  time.Time `msgpack:"la"`
	InterruptedAt time.Time `msgpack:"ia,omitempty"`
	// ExpiresAt is when an interrupted session's reconnect window ends.
	ExpiresAt time.Time `msgpack:"ea,omitempty"`
	LastSeq   uint64    `msgpack:"ls"`
	// Epoch is the owner epoch, bumped by every Claim; Owner names the
	// node that claimed it (empty on a single node). An epoch belongs to
	// one owner: a replica refuses the same epoch from another node.
	Epoch uint64 `msgpack:"ep"`
	Owner string `msgpack:"ow,omitempty"`
	// LastEpoch is the epoch the last entry was written under: of two
	// copies of a log, the one whose last entry has the newer epoch, then
	// the longer one, is the one every acknowledged entry is in.
	LastEpoch uint64 `msgpack:"le,omitempty"`
	Sensitive bool   `msgpack:"se,omitempty"`
	State     []byte `msgpack:"x,omitempty"`
	// Settled is set by the cluster (wal gives it no meaning but "keep the
	// largest"): the newest configuration under which the session's owner
	// made this copy complete, so a claim need not look at the holders of
	// older configurations.
	Settled uint64 `msgpack:"sd,omitempty"`
}

// SessionData is everything stored about a session but its entries.
type SessionData struct {
	Header Header
	// Context is the encoded user and agent context (package actor's
	// schema), nil when none was ever written.
	Context []byte
}

// Send is a client send id and the seq of the user entry it became.
type Send struct {
	ID  string
	Seq uint64
}

// Sentinel errors callers branch on.
var (
	ErrNotFound   = errors.New("wal: session not found")
	ErrExists     = errors.New("wal: session already exists")
	ErrStaleEpoch = errors.New("wal: stale owner epoch")
	ErrNotClaimed = errors.New("wal: session not claimed")
	ErrSeqGap     = errors.New("wal: entries do not follow the session's last seq")
	ErrCorrupt    = errors.New("wal: corrupt data")
	ErrClosed     = errors.New("wal: closed")
	ErrBadID      = errors.New("wal: invalid session id")
)

// CorruptError names the session (and entry, when there is one) whose
// stored bytes could not be decoded or whose log has a hole.
type CorruptError struct {
	SessionID string
	Seq       uint64 // 0 for the header or the context
	What      string // "header", "context", "entry"
	Err       error
}

func (e *CorruptError) Error() string {
	if e.Seq == 0 {
		return fmt.Sprintf("wal: corrupt %s of session %q: %v", e.What, e.SessionID, e.Err)
	}
	return fmt.Sprintf("wal: corrupt entry %d of session %q: %v", e.Seq, e.SessionID, e.Err)
}

// Unwrap lets errors.Is(err, ErrCorrupt) match.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// MaxIDLen is the longest session id the log accepts.
const MaxIDLen = 64

// CheckID reports whether sid can name a session: 1–64 bytes, no NUL.
func CheckID(sid string) error {
	if sid == "" || len(sid) > MaxIDLen || bytes.IndexByte([]byte(sid), 0) >= 0 {
		return fmt.Errorf("%w: %q", ErrBadID, sid)
	}
	return nil
}

// Key layout; see doc.go.
const (
	prefixHeader  = 'm'
	prefixContext = 'c'
	prefixEntry   = 'e'
	prefixSend    = 's'
	prefixFence   = 'f'
)

var keyAlive = []byte("nalive")

func headerKey(sid string) []byte  { return append([]byte{prefixHeader}, sid...) }
func contextKey(sid string) []byte { return append([]byte{prefixContext}, sid...) }
func fenceKey(sid string) []byte   { return append([]byte{prefixFence}, sid...) }

// sessionPrefix is the start of sid's keys under prefix p; the range ends
// at the same bytes with a final 0x01.
func sessionPrefix(p byte, sid string) []byte {
	k := make([]byte, 0, len(sid)+2+8)
	k = append(k, p)
	k = append(k, sid...)
	return append(k, 0)
}

func sessionEnd(p byte, sid string) []byte {
	k := sessionPrefix(p, sid)
	k[len(k)-1] = 1
	return k
}

func entryKey(sid string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(sessionPrefix(prefixEntry, sid), seq)
}

func sendKey(sid, id string) []byte { return append(sessionPrefix(prefixSend, sid), id...) }

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

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

func decodeHeaderOf(sid string, b []byte) (Header, error) {
	h, err := DecodeHeader(b)
	if err == nil && h.SessionID != sid {
		err = fmt.Errorf("header names session %q", h.SessionID)
	}
	if err != nil {
		return Header{}, &CorruptError{SessionID: sid, What: "header", Err: err}
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
			err = enc.EncodeMap(e.Metadata)
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
