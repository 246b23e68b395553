package actor

import (
	"context"
	"errors"
	"time"

	"github.com/tether-dev/tether/wal"
)

// Journal is the durable log an actor writes through. It is defined here,
// by its user: *wal.Log supplies it on one node, and the cluster will supply
// a replicated one with the same contract:
//
//   - Create stores a new session claimed with epoch 1; Claim bumps the
//     owner epoch and makes the caller the only writer; Release gives it up.
//   - Append returns nil only once the batch is durable, and refuses a
//     stale epoch (wal.ErrStaleEpoch) or a seq that does not follow.
//   - Reads return entries oldest first and report corruption as errors.
type Journal interface {
	Create(ctx context.Context, m wal.Meta) (wal.Meta, error)
	Claim(ctx context.Context, sid string) (wal.Meta, error)
	Release(ctx context.Context, sid string, epoch uint64) error
	Append(ctx context.Context, b wal.Batch) error
	Meta(sid string) (wal.Meta, error)
	SendSeq(sid, id string) (uint64, bool, error)
	ReadAfter(sid string, after uint64, limit int) ([]wal.Entry, error)
	ReadBefore(sid string, before uint64, limit int) ([]wal.Entry, error)
}

var _ Journal = (*wal.Log)(nil)

// Conn is a client connection as the actor sees it. The gateway supplies
// it. Both methods must return at once: the actor never waits on a client.
type Conn interface {
	// Deliver queues out for the client, in order. A connection that
	// cannot keep up closes itself (1013); the log still has everything.
	Deliver(out Out)
	// Close sends a close frame with code and ends the connection. Safe to
	// call more than once.
	Close(code int, reason string)
}

// Out is something the actor tells a client: one of the *Out types below.
type Out interface{ isOut() }

// SessionOut answers a hello.
type SessionOut struct {
	SessionID string
	Resumed   bool
	Reason    string
	Status    wal.Status
	LastSeq   uint64
	Window    time.Duration
	Context   map[string]any
	Pending   *wal.ToolCall
	Sensitive bool
}

// BatchOut is a history_batch: a resume's replay or a history page.
type BatchOut struct {
	Messages []wal.Entry
	Omitted  uint64
	Summary  string // empty: none
}

// EntryOut is one log entry, sent once it is durable.
type EntryOut struct{ Entry wal.Entry }

// AckOut confirms a send is durable as entry Seq.
type AckOut struct {
	ID  string
	Seq uint64
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

// Close codes the actor uses.
const (
	CloseNormal     = 1000
	CloseInternal   = 1011
	CloseRestarting = 1012
	CloseSuperseded = 4001
)

// Sentinel errors callers branch on.
var (
	// ErrReauthRequired: the session is sensitive and the token's
	// auth_time is missing or too old. The session was not touched.
	ErrReauthRequired = errors.New("actor: sensitive session needs a fresh login")
	// ErrBadLastSeq: the client claims a seq the session never had.
	ErrBadLastSeq = errors.New("actor: last_seq is beyond the session's log")
	// ErrGone: the actor stopped (shutdown or failure) and cannot take the
	// request; the client should reconnect.
	ErrGone = errors.New("actor: session actor stopped")
	// ErrClosed: the registry is shut down.
	ErrClosed = errors.New("actor: registry closed")
)
