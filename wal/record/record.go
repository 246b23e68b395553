package record

import (
	"bytes"
	"errors"
	"fmt"
	"time"
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

// Batch is one atomic append to a session: its new entries (possibly
// none), the send ids they answer, the session's new header, and its
// context when that changed.
type Batch struct {
	SessionID string
	// Epoch must be the epoch the session was claimed with.
	Epoch   uint64
	Entries []Entry
	Sends   []Send
	// Header replaces the stored one; its LastSeq must equal the last
	// entry's seq (or the previous LastSeq when Entries is empty). Its
	// Epoch and Owner are set by the log.
	Header Header
	// Context, when non-nil, replaces the stored context.
	Context []byte
	// NoSync marks a batch a crash may lose without harm (a header-only
	// status change on attach or detach): it gets no fsync of its own.
	// It is written to Pebble's log in order, so any later fsynced write
	// (and a clean Close) makes it durable too, and its done is still
	// called in order with the others, once it is applied.
	NoSync bool
}
