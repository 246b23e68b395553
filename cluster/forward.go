package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
)

// Resume attaches req.Conn to the session through its owner: this node's
// registry, or the owner's over the link (the client's socket stays here).
func (c *Cluster) Resume(ctx context.Context, req actor.ResumeRequest) (actor.Session, error) {
	return c.open(ctx, req.SessionID, req.Conn, sessionReq{
		SID: req.SessionID, User: req.UserID, LastSeq: req.LastSeq, AuthTime: req.AuthTime, Stream: req.Stream, Shared: req.Shared,
	}, func(reg *actor.Registry) (actor.Session, error) {
		h, err := reg.Resume(ctx, req)
		if err != nil {
			return nil, c.staleResume(ctx, req.SessionID, err)
		}
		return h, nil
	})
}

// staleResume checks a resume refused because the client holds a seq
// beyond this node's copy (machine.ErrBadLastSeq). That is the client's
// mistake only if this node really owns the session and has owned it
// since its actor claimed it. A node that was paused or cut off may not
// have applied the configurations that moved the session away (and maybe
// back) while another owner wrote to it: its actor's memory is stale. It
// is stopped, so that the retry claims the session afresh (fence, pull
// the newest copy), and the refusal becomes ErrUnavailable (retried).
func (c *Cluster) staleResume(ctx context.Context, sid string, err error) error {
	if !errors.Is(err, machine.ErrBadLastSeq) {
		return err
	}
	cfg, ferr := c.cons.fresh(ctx)
	owner := ferr == nil && c.cons.fsm.placement(cfg).Owner(sid) == c.cfg.Self.ID
	claimed := c.journal.claimedUnder(sid)
	if owner && c.claimProven(sid, claimed) {
		h, _ := c.cfg.Store.Header(sid)
		c.log.Warn("resume beyond the owner's copy: refused", "session", sid, "configuration", cfg.Number,
			"claimed_under", claimed, "last_seq", h.LastSeq, "epoch", h.Epoch, "last_epoch", h.LastEpoch, "err", err)
		return err
	}
	c.log.Warn("resume beyond this node's copy; its copy may be stale", "session", sid, "owner", owner,
		"claimed_under", claimed, "err", err, "fresh", ferr)
	if reg, rerr := c.registry(); rerr == nil {
		if err := reg.Evict(ctx, sid); err != nil {
			c.log.Warn("stop a stale session", "session", sid, "err", err)
		}
	}
	return fmt.Errorf("%w: %s may hold a stale copy of %s: %v", ErrUnavailable, c.cfg.Self.ID, sid, err)
}

// Create makes a new session on the owner of req.SessionID.
func (c *Cluster) Create(ctx context.Context, req actor.CreateRequest) (actor.Session, error) {
	return c.open(ctx, req.SessionID, req.Conn, sessionReq{SID: req.SessionID, User: req.UserID, Reason: nonEmpty(req.Reason, machine.ReasonNew)},
		func(reg *actor.Registry) (actor.Session, error) {
			h, err := reg.Create(ctx, req)
			if err != nil {
				return nil, err
			}
			return h, nil
		})
}

// Snapshot reads a session at its owner.
func (c *Cluster) Snapshot(ctx context.Context, sid, user string, authTime time.Time) (actor.Snapshot, error) {
	var snap actor.Snapshot
	err := c.route(ctx, sid, func(reg *actor.Registry) error {
		var err error
		snap, err = reg.Snapshot(ctx, sid, user, authTime)
		return err
	}, func(owner Member) error {
		var resp snapshotResp
		err := c.link.Call(ctx, owner.LinkAddr, methodSnapshot, snapshotReq{SID: sid, User: user, AuthTime: authTime}, &resp)
		if code := ErrorCode(err); code != "" {
			return permanent{actorErr(code, err.Error())}
		}
		snap = resp.Snap
		return err
	})
	return snap, err
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// permanent marks an answer from the owner that retrying cannot change.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// route runs local when this node owns sid and remote with the owner
// otherwise. An owner that cannot be reached is tried again, re-resolved
// each time (the membership may be settling), for ForwardFor; then the
// answer is ErrUnavailable.
func (c *Cluster) route(ctx context.Context, sid string, local func(*actor.Registry) error, remote func(Member) error) error {
	deadline := time.Now().Add(c.cfg.ForwardFor)
	backoff := 50 * time.Millisecond
	for {
		owner := c.owner(sid)
		var err error
		if owner == c.cfg.Self.ID {
			reg, rerr := c.registry()
			if rerr != nil {
				return ErrUnavailable
			}
			c.dropStale(ctx, reg, sid)
			// Unavailable here is a claim waiting for another node to
			// let the session go, or a replica not answering; an actor
			// gone under the call was stopped by a configuration that
			// moved the session (moveAway): both are retried, with the
			// owner found again.
			if err = local(reg); !retried(err) {
				return err
			}
		} else if m, ok := c.member(owner); ok {
			err = remote(m)
			var p permanent
			if err == nil || errors.As(err, &p) {
				return unwrapPermanent(err)
			}
		}
		if time.Now().Add(backoff).After(deadline) {
			c.stats.unavailable.Add(1)
			c.log.Warn("session owner unreachable", "session", sid, "owner", owner, "err", err)
			return ErrUnavailable
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// dropStale stops sid's actor if another node owned the session since
// the actor claimed it (moveAway does the same for every actor, but a
// moment later): its memory may miss what that owner wrote, and the next
// activation claims the session afresh.
func (c *Cluster) dropStale(ctx context.Context, reg *actor.Registry, sid string) {
	if c.ownedThroughout(sid) {
		return
	}
	if err := reg.Evict(ctx, sid); err != nil {
		c.log.Warn("stop a stale session", "session", sid, "err", err)
	}
}

// retried reports whether err from this node's registry is a passing
// one, which another try with the owner found anew may not meet: the
// session is claimed elsewhere or a replica does not answer
// (ErrUnavailable), or the session's actor stopped under the call
// (actor.ErrGone), as a configuration that gives the session to another
// node stops it.
func retried(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, actor.ErrGone)
}

func unwrapPermanent(err error) error {
	var p permanent
	if errors.As(err, &p) {
		return p.err
	}
	return err
}

// open routes a hello to the session's owner.
func (c *Cluster) open(ctx context.Context, sid string, conn machine.Conn, req sessionReq, local func(*actor.Registry) (actor.Session, error)) (actor.Session, error) {
	var sess actor.Session
	err := c.route(ctx, sid, func(reg *actor.Registry) error {
		var err error
		sess, err = local(reg)
		return err
	}, func(owner Member) error {
		var err error
		sess, err = c.openRemote(ctx, owner, conn, req)
		return err
	})
	return sess, err
}

// openRemote opens a session stream to the owner and waits for its answer
// to the hello.
func (c *Cluster) openRemote(ctx context.Context, owner Member, conn machine.Conn, req sessionReq) (actor.Session, error) {
	_, req.Frames = conn.(FrameConn)
	s, err := c.link.Open(ctx, owner.LinkAddr, methodSession, req)
	if err != nil {
		return nil, err
	}
	raw, err := s.Recv(ctx)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	var res sessionResult
	if err := msgpack.Unmarshal(raw, &res); err != nil {
		_ = s.Close()
		return nil, permanent{fmt.Errorf("cluster: bad answer from %s: %w", owner.ID, err)}
	}
	if res.Code != "" {
		_ = s.Close()
		if res.Code == codeClosed || res.Code == codeUnavailable {
			return nil, fmt.Errorf("cluster: the owner cannot serve %s yet: %s", req.SID, res.Message) // retried
		}
		return nil, permanent{actorErr(res.Code, res.Message)}
	}
	c.stats.forwarded.Add(1)
	r := &remote{c: c, s: s, conn: conn}
	c.wg.Add(1)
	go r.read()
	return r, nil
}

// FrameConn is a client connection that also takes frames already encoded
// for it (by the session's owner, with Config.EncodeFrame): it queues
// them as they are.
type FrameConn interface {
	machine.Conn
	DeliverFrame(frame []byte)
}

// remote is a session whose owner is another node: the client's frames go
// to it over a link stream, and what its actor says comes back the same
// way and is delivered to the client's connection here.
type remote struct {
	c    *Cluster
	s    *Stream
	conn machine.Conn
	once sync.Once
}

func (r *remote) op(ctx context.Context, m opMsg) error {
	if err := r.s.Send(ctx, m); err != nil {
		return fmt.Errorf("%w: %v", actor.ErrGone, err)
	}
	return nil
}

func (r *remote) Send(ctx context.Context, id, content string, metadata map[string]any) error {
	return r.op(ctx, opMsg{Op: "send", ID: id, Content: content, Metadata: metadata})
}

func (r *remote) History(ctx context.Context, before uint64, limit int) error {
	return r.op(ctx, opMsg{Op: "history", Before: before, Limit: limit})
}

func (r *remote) SetContext(ctx context.Context, set map[string]any) error {
	return r.op(ctx, opMsg{Op: "context", Set: set})
}

func (r *remote) Complete(ctx context.Context) error { return r.op(ctx, opMsg{Op: "complete"}) }

func (r *remote) Interrupt(ctx context.Context, id, content string, metadata map[string]any) error {
	return r.op(ctx, opMsg{Op: "interrupt", ID: id, Content: content, Metadata: metadata})
}

func (r *remote) Cancel(ctx context.Context, replyTo uint64) error {
	return r.op(ctx, opMsg{Op: "cancel", ReplyTo: replyTo})
}

func (r *remote) Approve(ctx context.Context, callID string, approved bool) error {
	return r.op(ctx, opMsg{Op: "approve", CallID: callID, Approved: approved})
}

// Detach closes the stream; the owner detaches the session when it ends.
func (r *remote) Detach() { r.once.Do(func() { _ = r.s.Close() }) }

// read delivers what the owner's actor says to the client. When the
// stream ends without the owner closing the client (the owner died or the
// link broke), the client is told to reconnect.
func (r *remote) read() {
	defer r.c.wg.Done()
	told := false // the owner closed the client
	for {
		raw, err := r.s.Recv(r.c.ctx)
		if err != nil {
			// Even a clean end (io.EOF) may come without the owner's
			// close: its actor stopped and the stream was ended before
			// the close went out. The client must not wait on a session
			// that is gone; closing it twice is harmless.
			if !told {
				r.conn.Close(machine.CloseShutdown, "lost the session's owner; reconnect")
			}
			return
		}
		var m outMsg
		if err := msgpack.Unmarshal(raw, &m); err != nil {
			r.c.log.Error("bad message from a session's owner", "err", err)
			r.conn.Close(machine.CloseInternal, "internal error")
			r.Detach()
			return
		}
		if m.Close != nil {
			told = true
			r.conn.Close(m.Close.Why, m.Close.Msg)
			continue
		}
		if len(m.Frame) > 0 {
			if fc, ok := r.conn.(FrameConn); ok { // it is: the open said so
				fc.DeliverFrame(m.Frame)
			}
			continue
		}
		if o := m.out(); o != nil {
			r.conn.Deliver(o)
		}
	}
}
