package actor

import (
	"context"
	"errors"
	"time"

	"github.com/tether-dev/tether/wal"
)

// OpenRequest is a client's hello, after the gateway checked its token.
type OpenRequest struct {
	// SessionID to resume; empty for a new session.
	SessionID string
	// UserID comes from the token, never from the client's fields.
	UserID  string
	LastSeq uint64
	// AuthTime is the token's auth_time; zero when it has none.
	AuthTime time.Time
	Conn     Conn
}

// Handle is a connection's way to its session's actor. Requests are
// queued to the actor; answers reach the client through its Conn.
type Handle struct {
	a         *actor
	conn      Conn
	SessionID string
	// Reason is the hello's outcome: resumed, new, not_found, expired or
	// completed.
	Reason string
}

// attempts bounds how often an open retries an actor that stopped under
// it (passivation racing the hello).
const attempts = 3

// Open answers a hello: it resumes the named session when the user owns it
// and it is within its window, and otherwise creates a new session, saying
// why. The session frame (and on a resume the history_batch) are delivered
// to req.Conn before Open returns. A sensitive session without a fresh
// enough login gives ErrReauthRequired and is left as it was.
func (r *Registry) Open(ctx context.Context, req OpenRequest) (*Handle, error) {
	reason := ReasonNew
	if req.SessionID != "" {
		h, why, err := r.resume(ctx, req)
		if err != nil || h != nil {
			return h, err
		}
		reason = why
	}
	for range attempts {
		a, err := r.create(ctx, req.UserID)
		if err != nil {
			return nil, err
		}
		res, err := r.attach(ctx, a, evAttach{conn: req.Conn, userID: req.UserID, newReason: reason, now: r.cfg.Now()})
		if errors.Is(err, ErrGone) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &Handle{a: a, conn: req.Conn, SessionID: a.sid, Reason: res.reason}, nil
	}
	return nil, ErrGone
}

// resume returns a handle, or the reason a new session must be made.
func (r *Registry) resume(ctx context.Context, req OpenRequest) (*Handle, string, error) {
	if len(req.SessionID) > wal.MaxIDLen {
		return nil, ReasonNotFound, nil
	}
	// A cheap read first: probing other users' or made-up ids must not
	// activate, claim or otherwise touch anything.
	m, err := r.cfg.Journal.Meta(req.SessionID)
	switch {
	case errors.Is(err, wal.ErrNotFound) || errors.Is(err, wal.ErrBadID):
		return nil, ReasonNotFound, nil
	case err != nil:
		return nil, "", err
	case m.UserID != req.UserID:
		return nil, ReasonNotFound, nil
	}
	ev := evAttach{conn: req.Conn, userID: req.UserID, lastSeq: req.LastSeq, authTime: req.AuthTime}
	for range attempts {
		a, err := r.get(ctx, req.SessionID)
		if errors.Is(err, wal.ErrNotFound) || errors.Is(err, wal.ErrBadID) {
			return nil, ReasonNotFound, nil
		}
		if err != nil {
			return nil, "", err
		}
		ev.now = r.cfg.Now()
		res, err := r.attach(ctx, a, ev)
		switch {
		case errors.Is(err, ErrGone):
			continue
		case err != nil:
			return nil, "", err
		case res.err != nil:
			return nil, "", res.err
		case res.reason != ReasonResumed:
			return nil, res.reason, nil
		}
		return &Handle{a: a, conn: req.Conn, SessionID: a.sid, Reason: ReasonResumed}, "", nil
	}
	return nil, "", ErrGone
}

func (r *Registry) attach(ctx context.Context, a *actor, ev evAttach) (effOpened, error) {
	reply := make(chan effOpened, 1)
	select {
	case a.mailbox <- mail{ev: ev, reply: reply}:
	case <-a.done:
		return effOpened{}, ErrGone
	case <-ctx.Done():
		return effOpened{}, ctx.Err()
	}
	select {
	case res := <-reply:
		return res, nil
	case <-a.done:
		return effOpened{}, ErrGone
	case <-ctx.Done():
		// The attach may still happen, and nobody would ever detach the
		// conn: queue the undo right behind it (the mailbox is FIFO).
		select {
		case a.mailbox <- mail{ev: evDetach{conn: ev.conn, now: r.cfg.Now()}}:
		case <-a.stopping:
		}
		return effOpened{}, ctx.Err()
	}
}

func (h *Handle) post(ctx context.Context, ev any) error {
	select {
	case h.a.mailbox <- mail{ev: ev}:
		return nil
	case <-h.a.done:
		return ErrGone
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Send queues a client send. metadata may be nil.
func (h *Handle) Send(ctx context.Context, id, content string, metadata map[string]any) error {
	return h.post(ctx, evSend{conn: h.conn, id: id, content: content, metadata: metadata, now: h.a.reg.cfg.Now()})
}

// History asks for up to limit entries before seq before (0: the end).
func (h *Handle) History(ctx context.Context, before uint64, limit int) error {
	return h.post(ctx, evHistory{conn: h.conn, before: before, limit: limit, now: h.a.reg.cfg.Now()})
}

// SetContext merges set into the user context; a nil value deletes a key.
func (h *Handle) SetContext(ctx context.Context, set map[string]any) error {
	return h.post(ctx, evContext{conn: h.conn, set: set, now: h.a.reg.cfg.Now()})
}

// Complete ends the session for good.
func (h *Handle) Complete(ctx context.Context) error {
	return h.post(ctx, evComplete{conn: h.conn, now: h.a.reg.cfg.Now()})
}

// Detach tells the actor the connection is gone; the reconnect window
// starts now. It waits until the actor has it, or has stopped.
func (h *Handle) Detach() {
	select {
	case h.a.mailbox <- mail{ev: evDetach{conn: h.conn, now: h.a.reg.cfg.Now()}}:
	case <-h.a.stopping:
	}
}

// Snapshot is a session as GET /v1/sessions/{id} shows it.
type Snapshot struct {
	Meta wal.Meta
	// Status is Meta.Status, with an interrupted session whose window has
	// passed shown as expired.
	Status   wal.Status
	Messages []wal.Entry
}

// Snapshot reads a session for its owner. Another user's session gives
// wal.ErrNotFound, exactly like an unknown id. It reads the log directly:
// the actor writes every change before showing it, so the log is never
// behind what any client has seen.
func (r *Registry) Snapshot(sid, user string) (Snapshot, error) {
	if len(sid) > wal.MaxIDLen {
		return Snapshot{}, wal.ErrNotFound
	}
	m, err := r.cfg.Journal.Meta(sid)
	if errors.Is(err, wal.ErrBadID) || (err == nil && m.UserID != user) {
		return Snapshot{}, wal.ErrNotFound
	}
	if err != nil {
		return Snapshot{}, err
	}
	msgs, err := r.cfg.Journal.ReadBefore(sid, m.LastSeq+1, r.cfg.ReplayLimit)
	if err != nil {
		return Snapshot{}, err
	}
	st := m.Status
	if st == wal.StatusInterrupted && !r.cfg.Now().Before(m.ExpiresAt) {
		st = wal.StatusExpired
	}
	return Snapshot{Meta: m, Status: st, Messages: msgs}, nil
}
