package actor

import (
	"context"
	"errors"
	"time"

	"github.com/tether-dev/tether/wal"
)

// Journal is the durable log an actor writes through. It is defined here,
// by its user: *wal.Log supplies it on one node, and the cluster supplies
// a replicated one with the same contract:
//
//   - Create stores a new session claimed with epoch 1; Claim bumps the
//     owner epoch and makes the caller the only writer (a clustered
//     journal first brings its copy up to date); Release gives it up.
//   - AppendAsync queues a batch and calls done exactly once, with nil
//     only when the batch is durable (on a cluster: on every replica too).
//     A session's batches complete in order, and after one fails every
//     later one of that claim fails (fail-stop). done must not block.
//     The batch is the journal's until done is called: the caller does
//     not change it (a replicated journal ships it once it is durable
//     locally), and the journal copies nothing it does not keep.
//   - Reads are of what is durable. Read bounds come from the header the
//     caller holds; an unreadable entry is returned as a stand-in. ReadRaw
//     reads the same entries without decoding them (a replay sends them on
//     as stored).
type Journal interface {
	Create(ctx context.Context, h wal.Header, context []byte) (wal.Header, error)
	Claim(ctx context.Context, sid string) (wal.SessionData, error)
	Release(ctx context.Context, sid string, epoch uint64) error
	AppendAsync(ctx context.Context, b *wal.Batch, done func(error)) error
	Header(sid string) (wal.Header, error)
	Load(sid string) (wal.SessionData, error)
	Read(sid string, lo, hi uint64, limit int, newest bool) ([]wal.Entry, error)
	ReadRaw(sid string, lo, hi uint64, limit int, newest bool) ([]wal.RawEntry, error)
	SendSeq(sid, id string) (uint64, bool, error)
	ScanSends(sid string, fn func(id string, seq uint64)) error
}

var _ Journal = (*wal.Log)(nil)

// Store is the node-local part of the log that boot recovery, the
// liveness mark and the retention sweep need.
type Store interface {
	ScanHeaders(ctx context.Context, fn func(wal.Header) error, onCorrupt func(*wal.CorruptError)) error
	LastAlive() (time.Time, bool, error)
	MarkAlive(ctx context.Context, t time.Time) error
	Sweep(ctx context.Context, now time.Time, retention time.Duration) (int, error)
}

var _ Store = (*wal.Log)(nil)

// Sentinel errors callers branch on, besides the machine's
// (machine.ErrBadLastSeq and the others).
var (
	// ErrGone: the actor stopped (shutdown or failure) and cannot take the
	// request; the client should reconnect.
	ErrGone = errors.New("actor: session actor stopped")
	// ErrClosed: the registry is shut down.
	ErrClosed = errors.New("actor: registry closed")
	// ErrNotFound: no session with that id for that user (the two are
	// never told apart).
	ErrNotFound = errors.New("actor: session not found")
	// ErrTooManySessions: the user has as many live sessions as allowed.
	ErrTooManySessions = errors.New("actor: too many live sessions for this user")
)
