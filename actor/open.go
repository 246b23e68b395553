package actor

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/actor/machine"
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
	Stream *machine.StreamMark
	Conn   machine.Conn
	// Shared keeps the connections already attached (attach "shared"):
	// all of them get every entry and delta. At most Config.MaxConns.
	Shared bool
}

// CreateRequest makes a new session with an id the caller chose (in a
// cluster, the gateway picks it and sends the create to its owner).
// Reason is what the client is told: new, or why its resume failed.
type CreateRequest struct {
	SessionID string
	UserID    string
	Reason    string
	Conn      machine.Conn
}

// Session is a connection's handle on its session, wherever the session
// lives: a *Handle when this node owns it, the cluster's remote session
// (forwarding to the owner over the node link) otherwise. The gateway
// holds one per connection and knows no other.
type Session interface {
	Send(ctx context.Context, id, content string, metadata map[string]any) error
	History(ctx context.Context, before uint64, limit int) error
	SetContext(ctx context.Context, set map[string]any) error
	Complete(ctx context.Context) error
	// Interrupt is Send that first cancels the running turn.
	Interrupt(ctx context.Context, id, content string, metadata map[string]any) error
	// Cancel stops the turn answering replyTo (0: the one running).
	Cancel(ctx context.Context, replyTo uint64) error
	// Approve decides on a tool call awaiting approval.
	Approve(ctx context.Context, callID string, approved bool) error
	// Detach says the connection is gone; it must not be lost and must
	// not block.
	Detach()
}

var _ Session = (*Handle)(nil)

// Handle is a connection's way to its session's actor. Requests are
// queued to the actor; answers reach the client through its Conn.
type Handle struct {
	reg *Registry
	// a is the session's actor; after it hibernated, the one that woke it.
	a         atomic.Pointer[actor]
	conn      machine.Conn
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
	notFound := &machine.NotResumedError{Reason: machine.ReasonNotFound}
	if wal.CheckID(req.SessionID) != nil {
		return nil, notFound
	}
	// A cheap read of the header alone first: probing other users' or
	// made-up ids must not activate, claim or decode anything. A session
	// whose actor is here is past that: its machine refuses what the
	// header would have (another user, ended, a stale login), and the read
	// is a good part of a reconnect storm's work. (An asleep one is
	// probed: the probe must not wake it.)
	if r.awake(req.SessionID) {
		return r.resume(ctx, req)
	}
	h, err := r.cfg.Journal.Header(req.SessionID)
	switch {
	case errors.Is(err, wal.ErrNotFound) || errors.Is(err, wal.ErrCorrupt):
		return nil, notFound
	case err != nil:
		return nil, err
	case h.UserID != req.UserID:
		return nil, notFound
	case h.Status == wal.StatusCompleted:
		return nil, &machine.NotResumedError{Reason: machine.ReasonCompleted}
	case h.Status == wal.StatusExpired:
		return nil, &machine.NotResumedError{Reason: machine.ReasonExpired}
	}
	if err := machine.MayReveal(h, req.AuthTime, r.clock.Now(), r.cfg.ReauthMaxAge); err != nil {
		return nil, err
	}
	return r.resume(ctx, req)
}

// awake reports whether sid has an actor here (maybe still activating).
func (r *Registry) awake(sid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.actors[sid]
	return ok
}

// resume attaches req.Conn to the session's actor, activating it.
func (r *Registry) resume(ctx context.Context, req ResumeRequest) (*Handle, error) {
	notFound := &machine.NotResumedError{Reason: machine.ReasonNotFound}
	ev := machine.Attach{Conn: req.Conn, UserID: req.UserID, LastSeq: req.LastSeq, AuthTime: req.AuthTime, Stream: req.Stream, Shared: req.Shared}
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
		case res.Err != nil:
			return nil, res.Err
		}
		return r.handle(a, req.Conn, machine.ReasonResumed), nil
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
	// The actor is registered before the session is stored, as get does
	// for an activation: from the moment the log holds the new session,
	// anyone else who activates it (a re-replication pass that found its
	// copy, a takeover) waits for this actor instead of starting a second
	// one, which would make this creation fail.
	a := newActor(r, req.SessionID)
	if err := r.register(a); err != nil {
		r.ended(req.UserID)
		return nil, err
	}
	now := r.clock.Now()
	h, err := r.cfg.Journal.Create(ctx, wal.Header{
		SessionID: req.SessionID, UserID: req.UserID, Status: wal.StatusActive, CreatedAt: now, LastActiveAt: now,
	}, nil)
	if err != nil {
		r.failed(a, err)
		r.ended(req.UserID)
		return nil, err
	}
	a.s, _ = machine.New(r.sessionConfig(), machine.Restore{Data: wal.SessionData{Header: h}}, now)
	a.epoch = h.Epoch
	r.activations.Add(1)
	close(a.readyCh)
	reason := req.Reason
	if reason == "" {
		reason = machine.ReasonNew
	}
	res, err := r.attach(ctx, a, machine.Attach{Conn: req.Conn, UserID: req.UserID, NewReason: reason})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, err
	}
	return r.handle(a, req.Conn, reason), nil
}

func (r *Registry) handle(a *actor, c machine.Conn, reason string) *Handle {
	h := &Handle{reg: r, conn: c, SessionID: a.sid, Reason: reason}
	h.a.Store(a)
	return h
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

func (r *Registry) attach(ctx context.Context, a *actor, ev machine.Attach) (machine.Opened, error) {
	reply := make(chan machine.Opened, 1)
	ev.Reply = reply
	if err := a.postWait(ctx, ev); err != nil {
		return machine.Opened{}, err
	}
	select {
	case res := <-reply:
		return res, nil
	case <-a.done:
		select {
		case res := <-reply:
			return res, nil
		default:
			return machine.Opened{}, ErrGone
		}
	case <-ctx.Done():
		// The attach may still happen, and nobody would ever detach the
		// conn: queue the undo right behind it (the mailbox is FIFO).
		a.post(machine.Detach{Conn: ev.Conn})
		return machine.Opened{}, ctx.Err()
	}
}

// Send queues a client send. metadata may be nil.
func (h *Handle) Send(ctx context.Context, id, content string, metadata map[string]any) error {
	return h.post(ctx, machine.Send{Conn: h.conn, ID: id, Content: content, Metadata: metadata})
}

// Interrupt is Send with interrupt: the running turn is cancelled, then
// this message is answered with everything so far.
func (h *Handle) Interrupt(ctx context.Context, id, content string, metadata map[string]any) error {
	return h.post(ctx, machine.Send{Conn: h.conn, ID: id, Content: content, Metadata: metadata, Interrupt: true})
}

// Cancel stops the turn answering user entry replyTo (0: the one running).
func (h *Handle) Cancel(ctx context.Context, replyTo uint64) error {
	return h.post(ctx, machine.Cancel{Conn: h.conn, ReplyTo: replyTo})
}

// Approve decides on the tool call callID, which awaits approval.
func (h *Handle) Approve(ctx context.Context, callID string, approved bool) error {
	return h.post(ctx, machine.Approve{Conn: h.conn, CallID: callID, Approved: approved})
}

// History asks for up to limit entries before seq before (0: the end).
func (h *Handle) History(ctx context.Context, before uint64, limit int) error {
	return h.post(ctx, machine.HistoryRequest{Conn: h.conn, Before: before, Limit: limit})
}

// SetContext merges set into the user context; a nil value deletes a key.
func (h *Handle) SetContext(ctx context.Context, set map[string]any) error {
	return h.post(ctx, machine.SetContext{Conn: h.conn, Set: set})
}

// Complete ends the session for good.
func (h *Handle) Complete(ctx context.Context) error {
	return h.post(ctx, machine.Complete{Conn: h.conn})
}

// Detach tells the actor the connection is gone; the reconnect window
// starts now. It never blocks.
func (h *Handle) Detach() {
	if a := h.a.Load(); !a.post(machine.Detach{Conn: h.conn}) && a.slept() {
		h.detachAsleep()
	}
}

// detachWakeTimeout bounds the wake of a hibernated session whose last
// connection went away.
const detachWakeTimeout = 10 * time.Second
