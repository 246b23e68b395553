package actor

import (
	"context"
	"errors"
	"time"

	"github.com/tether-dev/tether/wal"
)

// ResumeRequest is a client's hello naming a session, after the gateway
// checked its token.
type ResumeRequest struct {
	SessionID string
	// UserID comes from the token, never from the client's fields.
	UserID  string
	LastSeq uint64
	// AuthTime is the token's auth_time; zero when it has none.
	AuthTime time.Time
	// Stream, when set, says the client holds parts 0..Part of the reply
	// that will become entry Seq: it gets only the parts after those.
	Stream *StreamMark
	Conn   Conn
	// Shared keeps the connections already attached (attach "shared"):
	// all of them get every entry and delta. At most Config.MaxConns.
	Shared bool
}

// StreamMark is a hello's note of a reply the client holds in part.
type StreamMark struct {
	Seq  uint64 `msgpack:"s"`
	Part int    `msgpack:"p"`
}

// CreateRequest makes a new session with an id the caller chose (in a
// cluster, the gateway picks it and sends the create to its owner).
// Reason is what the client is told: new, or why its resume failed.
type CreateRequest struct {
	SessionID string
	UserID    string
	Reason    string
	Conn      Conn
}

// Handle is a connection's way to its session's actor. Requests are
// queued to the actor; answers reach the client through its Conn.
type Handle struct {
	a         *actor
	conn      Conn
	SessionID string
	// Reason is the hello's outcome: resumed, or why a new session was made.
	Reason string
}

// attempts bounds how often an open retries an actor that stopped under
// it (passivation racing the hello).
const attempts = 3

// Resume attaches req.Conn to the named session when the user owns it and
// it is within its window; the session frame and the history_batch are
// delivered to req.Conn before Resume returns. Otherwise it returns a
// *NotResumedError saying why (not_found for another user's session, as
// for an unknown id), ErrReauthRequired for a sensitive session without a
// fresh login, or ErrBadLastSeq; none of these change the session.
func (r *Registry) Resume(ctx context.Context, req ResumeRequest) (*Handle, error) {
	notFound := &NotResumedError{Reason: ReasonNotFound}
	if wal.CheckID(req.SessionID) != nil {
		return nil, notFound
	}
	// A cheap read of the header alone first: probing other users' or
	// made-up ids must not activate, claim or decode anything.
	h, err := r.cfg.Journal.Header(req.SessionID)
	switch {
	case errors.Is(err, wal.ErrNotFound) || errors.Is(err, wal.ErrCorrupt):
		return nil, notFound
	case err != nil:
		return nil, err
	case h.UserID != req.UserID:
		return nil, notFound
	case h.Status == wal.StatusCompleted:
		return nil, &NotResumedError{Reason: ReasonCompleted}
	case h.Status == wal.StatusExpired:
		return nil, &NotResumedError{Reason: ReasonExpired}
	}
	if err := MayReveal(h, req.AuthTime, r.clock.Now(), r.cfg.ReauthMaxAge); err != nil {
		return nil, err
	}
	ev := evAttach{conn: req.Conn, userID: req.UserID, lastSeq: req.LastSeq, authTime: req.AuthTime, stream: req.Stream, shared: req.Shared}
	for range attempts {
		a, err := r.get(ctx, req.SessionID)
		if errors.Is(err, wal.ErrNotFound) {
			return nil, notFound
		}
		if err != nil {
			return nil, err
		}
		res, err := r.attach(ctx, a, ev)
		switch {
		case errors.Is(err, ErrGone):
			continue
		case err != nil:
			return nil, err
		case res.err != nil:
			return nil, res.err
		}
		return &Handle{a: a, conn: req.Conn, SessionID: a.sid, Reason: ReasonResumed}, nil
	}
	return nil, ErrGone
}

// Create makes a new session and attaches req.Conn to it; the session
// frame is delivered before Create returns. It fails with wal.ErrExists
// when the id is taken and ErrTooManySessions when the user has
// MaxSessionsPerUser live sessions here.
func (r *Registry) Create(ctx context.Context, req CreateRequest) (*Handle, error) {
	if err := wal.CheckID(req.SessionID); err != nil {
		return nil, err
	}
	if err := r.reserve(req.UserID); err != nil {
		return nil, err
	}
	now := r.clock.Now()
	h, err := r.cfg.Journal.Create(ctx, wal.Header{
		SessionID: req.SessionID, UserID: req.UserID, Status: wal.StatusActive, CreatedAt: now, LastActiveAt: now,
	}, nil)
	if err != nil {
		r.ended(req.UserID)
		return nil, err
	}
	a := newActor(r, req.SessionID)
	a.s = newSession(r.sessionConfig(), wal.SessionData{Header: h}, state{}, contexts{}, nil, now)
	a.epoch = h.Epoch
	close(a.readyCh)
	if err := r.register(a); err != nil {
		_ = r.cfg.Journal.Release(context.Background(), req.SessionID, h.Epoch)
		r.ended(req.UserID)
		return nil, err
	}
	reason := req.Reason
	if reason == "" {
		reason = ReasonNew
	}
	res, err := r.attach(ctx, a, evAttach{conn: req.Conn, userID: req.UserID, newReason: reason})
	if err == nil {
		err = res.err
	}
	if err != nil {
		return nil, err
	}
	return &Handle{a: a, conn: req.Conn, SessionID: a.sid, Reason: reason}, nil
}

// reserve counts a new live session for user, unless the user is at the
// limit (ErrTooManySessions) or the registry is closed (ErrClosed: nothing
// must be created in the log that no actor will ever own).
func (r *Registry) reserve(user string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if n := r.cfg.MaxSessionsPerUser; n > 0 && r.live[user] >= n {
		return ErrTooManySessions
	}
	r.live[user]++
	return nil
}

func (r *Registry) attach(ctx context.Context, a *actor, ev evAttach) (opened, error) {
	reply := make(chan opened, 1)
	ev.reply = reply
	if err := a.postWait(ctx, ev); err != nil {
		return opened{}, err
	}
	select {
	case res := <-reply:
		return res, nil
	case <-a.done:
		select {
		case res := <-reply:
			return res, nil
		default:
			return opened{}, ErrGone
		}
	case <-ctx.Done():
		// The attach may still happen, and nobody would ever detach the
		// conn: queue the undo right behind it (the mailbox is FIFO).
		a.post(evDetach{conn: ev.conn})
		return opened{}, ctx.Err()
	}
}

// Send queues a client send. metadata may be nil.
func (h *Handle) Send(ctx context.Context, id, content string, metadata map[string]any) error {
	return h.a.postWait(ctx, evSend{conn: h.conn, id: id, content: content, metadata: metadata})
}

// Interrupt is Send with interrupt: the running turn is cancelled, then
// this message is answered with everything so far.
func (h *Handle) Interrupt(ctx context.Context, id, content string, metadata map[string]any) error {
	return h.a.postWait(ctx, evSend{conn: h.conn, id: id, content: content, metadata: metadata, interrupt: true})
}

// Cancel stops the turn answering user entry replyTo (0: the one running).
func (h *Handle) Cancel(ctx context.Context, replyTo uint64) error {
	return h.a.postWait(ctx, evCancel{conn: h.conn, replyTo: replyTo})
}

// Approve decides on the tool call callID, which awaits approval.
func (h *Handle) Approve(ctx context.Context, callID string, approved bool) error {
	return h.a.postWait(ctx, evApprove{conn: h.conn, callID: callID, approved: approved})
}

// History asks for up to limit entries before seq before (0: the end).
func (h *Handle) History(ctx context.Context, before uint64, limit int) error {
	return h.a.postWait(ctx, evHistory{conn: h.conn, before: before, limit: limit})
}

// SetContext merges set into the user context; a nil value deletes a key.
func (h *Handle) SetContext(ctx context.Context, set map[string]any) error {
	return h.a.postWait(ctx, evContext{conn: h.conn, set: set})
}

// Complete ends the session for good.
func (h *Handle) Complete(ctx context.Context) error {
	return h.a.postWait(ctx, evComplete{conn: h.conn})
}

// Detach tells the actor the connection is gone; the reconnect window
// starts now. It never blocks.
func (h *Handle) Detach() { h.a.post(evDetach{conn: h.conn}) }
