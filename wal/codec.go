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
// gap-free within a session, starting at 1.
type Entry struct {
	Seq      uint64         `msgpack:"q"`
	Role     string         `msgpack:"r"`
	Content  string         `msgpack:"c"`
	Time     float64        `msgpack:"t"` // Unix seconds
	Metadata map[string]any `msgpack:"m,omitempty"`
}

// ToolCall is the in-flight tool call of a session, with whatever partial
// result the tool has reported so far. It is kept in Meta until the call's
// result is logged.
type ToolCall struct {
	CallID  string         `msgpack:"id"`
	Name    string         `msgpack:"n"`
	Args    map[string]any `msgpack:"a,omitempty"`
	Status  string         `msgpack:"s"`
	Partial string         `msgpack:"p,omitempty"`
	// StartedSeq is the seq of the tool's `started` entry; ReplyTo the seq
	// of the user entry whose turn made the call.
	StartedSeq uint64 `msgpack:"ss"`
	ReplyTo    uint64 `msgpack:"rt"`
	// Attempts counts runs after the first, made when a crash cut an
	// idempotent call short.
	Attempts int `msgpack:"at,omitempty"`
}

// Meta is everything about a session that is not an entry: owner, status,
// window bookkeeping, the user's and the agent's context, the pending tool
// call and the queue of turns still owed. It is rewritten with every batch,
// so it stays small: it never holds entries.
type Meta struct {
	SessionID     string    `msgpack:"id"`
	UserID        string    `msgpack:"u"`
	Status        Status    `msgpack:"st"`
	CreatedAt     time.Time `msgpack:"ca"`
	LastActiveAt  time.Time `msgpack:"la"`
	InterruptedAt time.Time `msgpack:"ia,omitempty"`
	// ExpiresAt is when an interrupted session's reconnect window ends.
	ExpiresAt time.Time `msgpack:"ea,omitempty"`
	LastSeq   uint64    `msgpack:"ls"`
	// Epoch is the owner epoch, bumped by every Claim.
	Epoch        uint64         `msgpack:"ep"`
	Sensitive    bool           `msgpack:"se,omitempty"`
	Context      map[string]any `msgpack:"cx,omitempty"`
	AgentContext map[string]any `msgpack:"ax,omitempty"`
	Pending      *ToolCall      `msgpack:"pt,omitempty"`
	// Turns are the seqs of user entries the agent has not answered yet,
	// oldest first.
	Turns []uint64 `msgpack:"tq,omitempty"`
	// Steps are the seqs of the finished tool entries of the turn in
	// progress (the one answering Turns[0]), so an engine step reads just
	// those instead of scanning the log.
	Steps []uint64 `msgpack:"sp,omitempty"`
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
	Seq       uint64 // 0 for metadata
	Err       error
}

func (e *CorruptError) Error() string {
	if e.Seq == 0 {
		return fmt.Sprintf("wal: corrupt metadata of session %q: %v", e.SessionID, e.Err)
	}
	return fmt.Sprintf("wal: corrupt entry %d of session %q: %v", e.Seq, e.SessionID, e.Err)
}

// Unwrap lets errors.Is(err, ErrCorrupt) match.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// MaxIDLen is the longest session id the log accepts.
const MaxIDLen = 64

func checkID(sid string) error {
	if sid == "" || len(sid) > MaxIDLen || bytes.IndexByte([]byte(sid), 0) >= 0 {
		return fmt.Errorf("%w: %q", ErrBadID, sid)
	}
	return nil
}

const (
	prefixMeta  = 'm'
	prefixEntry = 'e'
	prefixSend  = 's'
)

var keyAlive = []byte("nalive")

func metaKey(sid string) []byte { return append([]byte{prefixMeta}, sid...) }

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

func encode(v any) ([]byte, error) { return msgpack.Marshal(v) }

// DecodeEntry decodes one stored entry. It is exported for the fuzz target
// and for tools that read a log; it never panics on bad input.
func DecodeEntry(b []byte) (Entry, error) {
	var e Entry
	if err := checkMsgpack(b); err != nil {
		return Entry{}, err
	}
	if err := msgpack.Unmarshal(b, &e); err != nil {
		return Entry{}, err
	}
	if e.Seq == 0 {
		return Entry{}, errors.New("entry without seq")
	}
	return e, nil
}

// EncodeEntry is DecodeEntry's inverse.
func EncodeEntry(e Entry) ([]byte, error) { return encode(e) }

func decodeMeta(sid string, b []byte) (Meta, error) {
	var m Meta
	if err := checkMsgpack(b); err != nil {
		return Meta{}, &CorruptError{SessionID: sid, Err: err}
	}
	if err := msgpack.Unmarshal(b, &m); err != nil {
		return Meta{}, &CorruptError{SessionID: sid, Err: err}
	}
	if m.SessionID != sid {
		return Meta{}, &CorruptError{SessionID: sid, Err: fmt.Errorf("metadata names session %q", m.SessionID)}
	}
	return m, nil
}
