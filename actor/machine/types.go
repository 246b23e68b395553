package machine

import (
	"errors"
	"fmt"
	"time"

	"github.com/tether-dev/tether/wal/record"
)

// Conn is a client connection as the actor sees it. The gateway supplies
// it (directly, or through the node link for a client on another node).
// Both methods must return at once: the actor never waits on a client.
type Conn interface {
	// Deliver queues out for the client, in order. A connection that
	// cannot keep up closes itself; the log still has everything.
	Deliver(out Out)
	// Close ends the connection after what was delivered, telling the
	// client why. Safe to call more than once.
	Close(why CloseReason, msg string)
}

// CloseReason is why the actor ends a connection; the gateway maps each
// to its close code.
type CloseReason int

const (
	// CloseCompleted: the session was completed (1000).
	CloseCompleted CloseReason = iota + 1
	// CloseSuperseded: a newer connection resumed the session (4001).
	CloseSuperseded
	// CloseShutdown: the node is shutting down or the session moved to
	// another node; reconnect anywhere (1012).
	CloseShutdown
	// CloseInternal: the session's storage failed (1011).
	CloseInternal
	// CloseUnavailable: the session's store cannot take writes now (its
	// replicas do not answer); retry, anywhere (1013).
	CloseUnavailable
)

// Out is something the actor tells a client: one of the *Out types below.
type Out interface{ isOut() }

// SessionOut answers a hello.
type SessionOut struct {
	SessionID string
	Resumed   bool
	Reason    string
	Status    record.Status
	LastSeq   uint64
	Window    time.Duration
	Context   map[string]any
	Pending   *ToolCall
	Sensitive bool
}

// BatchOut is a history_batch: a resume's replay or a history page. Its
// entries, oldest first, are Stored (read from the log, sent on as the
// log stores them: a replay need not decode what it only passes on) then
// Messages (the newest, which the machine held).
type BatchOut struct {
	Stored   []record.RawEntry `msgpack:",omitempty"`
	Messages []record.Entry
	Omitted  uint64
	Summary  string // empty: none
}

// First is the seq of the batch's oldest entry; ok is false when it has
// none.
func (b *BatchOut) First() (seq uint64, ok bool) {
	switch {
	case len(b.Stored) > 0:
		return b.Stored[0].Seq, true
	case len(b.Messages) > 0:
		return b.Messages[0].Seq, true
	}
	return 0, false
}

// Entries decodes the batch's entries, oldest first: for a reader that
// needs them as values, not as a frame.
func (b *BatchOut) Entries() ([]record.Entry, error) {
	out := make([]record.Entry, 0, len(b.Stored)+len(b.Messages))
	for i := range b.Stored {
		e, err := b.Stored[i].Decode()
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", b.Stored[i].Seq, err)
		}
		out = append(out, e)
	}
	return append(out, b.Messages...), nil
}

// Decoded is the batch with every entry in Messages.
func (b *BatchOut) Decoded() (*BatchOut, error) {
	if len(b.Stored) == 0 {
		return b, nil
	}
	es, err := b.Entries()
	if err != nil {
		return nil, err
	}
	return &BatchOut{Messages: es, Omitted: b.Omitted, Summary: b.Summary}, nil
}

// EntryOut is one log entry, sent once it is durable.
type EntryOut struct{ Entry record.Entry }

// AckOut confirms a send is durable as entry Seq.
type AckOut struct {
	ID  string
	Seq uint64
}

// DeltaOut is text of the agent reply that will become entry Seq: parts
// From..Part joined. It is not durable; the entry's EntryOut supersedes
// it.
type DeltaOut struct {
	Seq        uint64
	From, Part int
	Text       string
}

// ContextOut carries the whole merged user context.
type ContextOut struct{ Context map[string]any }

// CompletedOut confirms a complete.
type CompletedOut struct{ SessionID string }

// ErrorOut reports a failure about one request; the connection stays open.
type ErrorOut struct{ Code, Message, ID string }

func (*SessionOut) isOut()   {}
func (*BatchOut) isOut()     {}
func (*EntryOut) isOut()     {}
func (*AckOut) isOut()       {}
func (*ContextOut) isOut()   {}
func (*DeltaOut) isOut()     {}
func (*CompletedOut) isOut() {}
func (*ErrorOut) isOut()     {}

// Reasons a hello gets, as PROTOCOL.md names them.
const (
	ReasonResumed   = "resumed"
	ReasonNew       = "new"
	ReasonExpired   = "expired"
	ReasonNotFound  = "not_found"
	ReasonCompleted = "completed"
)

// Error codes the actor puts in ErrorOut, as PROTOCOL.md names them.
const (
	CodeBadRequest  = "bad_request"
	CodeTooLarge    = "too_large"
	CodeRateLimited = "rate_limited"
	CodeInternal    = "internal"
	CodeUnavailable = "unavailable"
)

// Sentinel errors callers branch on.
var (
	// ErrReauthRequired: the session is sensitive and the token's
	// auth_time is missing or too old. The session was not touched.
	ErrReauthRequired = errors.New("actor: sensitive session needs a fresh login")
	// ErrBadLastSeq: the client claims a seq the session never had.
	ErrBadLastSeq = errors.New("actor: last_seq is beyond the session's log")
	// ErrUnavailable: the journal cannot store the session's entries now
	// (in a cluster: not on every replica within the bound); nothing was
	// acknowledged, and the client should retry.
	ErrUnavailable = errors.New("actor: the session cannot be written now")
	// ErrTooManyConns: a shared attach found the session at its limit of
	// connections (Config.MaxConns); nothing changed.
	ErrTooManyConns = errors.New("actor: too many connections share this session")
	// ErrNotResumed is matched by every *NotResumedError.
	ErrNotResumed = errors.New("actor: session not resumed")
)

// NotResumedError says why a hello could not resume its session:
// ReasonNotFound, ReasonExpired or ReasonCompleted. The caller creates a
// new session and tells the client this reason.
type NotResumedError struct{ Reason string }

func (e *NotResumedError) Error() string { return "actor: session not resumed: " + e.Reason }

// Is matches ErrNotResumed.
func (e *NotResumedError) Is(target error) bool { return target == ErrNotResumed }

// MayReveal is the one rule for showing a session to a client, used by
// every path that reveals one (a resume, the HTTP snapshot): a sensitive
// session needs a token whose auth_time is at most maxAge old.
func MayReveal(h record.Header, authTime, now time.Time, maxAge time.Duration) error {
	if h.Sensitive && (authTime.IsZero() || now.Sub(authTime) > maxAge) {
		return ErrReauthRequired
	}
	return nil
}

// StreamMark is a hello's note of a reply the client holds in part.
type StreamMark struct {
	Seq  uint64 `msgpack:"s"`
	Part int    `msgpack:"p"`
}
