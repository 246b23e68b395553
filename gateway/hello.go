package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/wal"
)

// hello handles the first frame; it reports whether a session is attached.
func (c *conn) hello() bool {
	f, bad, ok := c.read(c.readMessage())
	c.releaseRead()
	if !ok {
		return false
	}
	switch {
	case bad != nil:
		c.fail(wire.CodeBadRequest, bad.Error(), wire.ClosePolicy)
		return false
	case f.Type != wire.TypeHello:
		c.badFrame("the first frame must be hello")
		c.fail(wire.CodeBadRequest, "the first frame must be hello", wire.ClosePolicy)
		return false
	case f.Attach != "" && f.Attach != wire.AttachShared:
		c.badFrame("unknown attach " + f.Attach)
		c.fail(wire.CodeBadRequest, fmt.Sprintf("attach must be %q or left out", wire.AttachShared), wire.ClosePolicy)
		return false
	}
	start := time.Now()
	id, err := c.srv.tokens.verify(f.Token, c.srv.cfg.Now())
	if err != nil {
		c.srv.log.Debug("hello refused", "err", err)
		c.fail(wire.CodeUnauthorized, err.Error(), wire.ClosePolicy)
		return false
	}
	c.userID = id.UserID
	c.holdWrites(true)
	sess, reason, err := c.open(f, id)
	c.holdWrites(false)
	if err != nil {
		c.openFailed(err)
		return false
	}
	c.sess = sess
	if reason == machine.ReasonResumed {
		c.srv.metrics.resume.Observe(time.Since(start).Seconds())
	}
	c.srv.log.Debug("hello", "session", c.sid, "user", id.UserID, "reason", reason, "last_seq", f.LastSeq)
	return true
}

// open resumes the session the hello names, or creates one (with an id
// chosen here, so that in a cluster the create goes to its owner).
func (c *conn) open(f wire.ClientFrame, id Identity) (actor.Session, string, error) {
	ctx := c.srv.ctx
	reason := machine.ReasonNew
	if f.SessionID != "" {
		req := actor.ResumeRequest{SessionID: f.SessionID, UserID: id.UserID, LastSeq: f.LastSeq, AuthTime: id.AuthTime, Conn: c,
			Shared: f.Attach == wire.AttachShared}
		if f.Stream != nil {
			req.Stream = &machine.StreamMark{Seq: f.Stream.Seq, Part: f.Stream.Part}
		}
		sess, err := c.srv.cfg.Backend.Resume(ctx, req)
		var nr *machine.NotResumedError
		if !errors.As(err, &nr) {
			c.sid = f.SessionID
			return sess, machine.ReasonResumed, err
		}
		reason = nr.Reason
	}
	for range 3 {
		sid := c.srv.cfg.Backend.NewID()
		sess, err := c.srv.cfg.Backend.Create(ctx, actor.CreateRequest{SessionID: sid, UserID: id.UserID, Reason: reason, Conn: c})
		if errors.Is(err, wal.ErrExists) {
			continue
		}
		c.sid = sid
		return sess, reason, err
	}
	return nil, "", errors.New("could not find a free session id")
}

func (c *conn) openFailed(err error) {
	switch {
	case errors.Is(err, machine.ErrReauthRequired):
		c.fail(wire.CodeReauthRequired, "this session is sensitive: log in again to resume it", wire.CloseReauth)
	case errors.Is(err, machine.ErrBadLastSeq):
		c.fail(wire.CodeBadRequest, "last_seq is beyond the session's last seq", wire.ClosePolicy)
	case errors.Is(err, machine.ErrTooManyConns):
		c.fail(wire.CodeRateLimited, "this session already has as many shared connections as allowed", wire.CloseTryAgain)
	case errors.Is(err, actor.ErrTooManySessions):
		c.fail(wire.CodeRateLimited, "too many live sessions for this user: resume or complete one of them", wire.CloseTryAgain)
	case errors.Is(err, actor.ErrClosed):
		c.closeWith(wire.CloseRestart, "node shutting down")
	case errors.Is(err, ErrUnavailable):
		c.fail(wire.CodeUnavailable, "the session's owner cannot be reached; retry", wire.CloseTryAgain)
	case errors.Is(err, actor.ErrGone):
		// The session's actor stopped under the hello (it moved to
		// another node, or this one is stopping): a retry finds it anew.
		c.fail(wire.CodeUnavailable, "the session moved while it was being opened; retry", wire.CloseTryAgain)
	default:
		c.srv.log.Error("open session", "session", c.sid, "err", err)
		c.fail(wire.CodeInternal, "could not open the session", wire.CloseInternal)
	}
}
