package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/tether-dev/tether/actor"
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
	id, err := Verify(c.srv.cfg.Secret, f.Token, c.srv.cfg.Now())
	if err != nil {
		c.srv.log.Debug("hello refused", "err", err)
		c.fail(wire.CodeUnauthorized, err.Error(), wire.ClosePolicy)
		return false
	}
	c.userID = id.UserID
	sess, reason, err := c.open(f, id)
	if err != nil {
		c.openFailed(err)
		return false
	}
	c.sess = sess
	if reason == actor.ReasonResumed {
		c.srv.metrics.resume.Observe(time.Since(start).Seconds())
	}
	c.srv.log.Debug("hello", "session", c.sid, "user", id.UserID, "reason", reason, "last_seq", f.LastSeq)
	return true
}

// open resumes the session the hello names, or creates one (with an id
// chosen here, so that in a cluster the create goes to its owner).
func (c *conn) open(f wire.ClientFrame, id Identity) (Session, string, error) {
	ctx := c.srv.ctx
	reason := actor.ReasonNew
	if f.SessionID != "" {
		req := actor.ResumeRequest{SessionID: f.SessionID, UserID: id.UserID, LastSeq: f.LastSeq, AuthTime: id.AuthTime, Conn: c,
			Shared: f.Attach == wire.AttachShared}
		if f.Stream != nil {
			req.Stream = &actor.StreamMark{Seq: f.Stream.Seq, Part: f.Stream.Part}
		}
		sess, err := c.srv.cfg.Backend.Resume(ctx, req)
		var nr *actor.NotResumedError
		if !errors.As(err, &nr) {
			c.sid = f.SessionID
			return sess, actor.ReasonResumed, err
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
	case errors.Is(err, actor.ErrReauthRequired):
		c.fail(wire.CodeReauthRequired, "this session is sensitive: log in again to resume it", wire.CloseReauth)
	case errors.Is(err, actor.ErrBadLastSeq):
		c.fail(wire.CodeBadRequest, "last_seq is beyond the session's last seq", wire.ClosePolicy)
	case errors.Is(err, actor.ErrTooManyConns):
		c.fail(wire.CodeRateLimited, "this session already has as many shared connections as allowed", wire.CloseTryAgain)
	case errors.Is(err, actor.ErrTooManySessions):
		c.fail(wire.CodeRateLimited, "too many live sessions for this user: resume or complete one of them", wire.CloseTryAgain)
	case errors.Is(err, actor.ErrClosed):
		c.closeWith(wire.CloseRestart, "node shutting down")
	case errors.Is(err, ErrUnavailable):
		c.fail(wire.CodeUnavailable, "the session's owner cannot be reached; retry", wire.CloseTryAgain)
	default:
		c.srv.log.Error("open session", "session", c.sid, "err", err)
		c.fail(wire.CodeInternal, "could not open the session", wire.CloseInternal)
	}
}

// next handles one frame read after the hello; false ends the
// connection.
func (c *conn) next(mt int, data []byte, rerr error) bool {
	f, bad, ok := c.read(mt, data, rerr)
	if !ok || c.isClosing() {
		return false
	}
	c.heard()
	if f.Type == wire.TypePing {
		b, _ := json.Marshal(wire.Pong{Type: wire.TypePong, ID: f.ID})
		c.DeliverFrame(b)
		return true
	}
	// Every other frame counts against the connection's rate: each one
	// makes the server work (a history page, a fsynced context write).
	if c.limiter != nil && !c.limiter.Allow() {
		c.Deliver(&actor.ErrorOut{Code: wire.CodeRateLimited, ID: f.ID,
			Message: fmt.Sprintf("more than %g frames per second; nothing was done, send again later", c.srv.cfg.Rate)})
		return true
	}
	if bad != nil {
		c.Deliver(&actor.ErrorOut{Code: wire.CodeBadRequest, Message: bad.Error(), ID: f.ID})
		return true
	}
	var err error
	ctx := c.srv.ctx
	switch f.Type {
	case wire.TypeSend:
		if code, msg := c.checkSend(f); code != "" {
			c.Deliver(&actor.ErrorOut{Code: code, Message: msg, ID: f.ID})
			return true
		}
		if f.Interrupt {
			err = c.sess.Interrupt(ctx, f.ID, f.Content, f.Metadata)
		} else {
			err = c.sess.Send(ctx, f.ID, f.Content, f.Metadata)
		}
	case wire.TypeCancel:
		err = c.sess.Cancel(ctx, f.ReplyTo)
	case wire.TypeApprove:
		if f.CallID == "" || f.Approved == nil {
			c.Deliver(&actor.ErrorOut{Code: wire.CodeBadRequest, Message: "approve needs a call_id and approved (true or false)"})
			return true
		}
		err = c.sess.Approve(ctx, f.CallID, *f.Approved)
	case wire.TypeHistory:
		if f.Limit < 0 {
			c.Deliver(&actor.ErrorOut{Code: wire.CodeBadRequest, Message: "limit must not be negative"})
			return true
		}
		err = c.sess.History(ctx, f.BeforeSeq, f.Limit)
	case wire.TypeContext:
		if f.Set == nil {
			c.Deliver(&actor.ErrorOut{Code: wire.CodeBadRequest, Message: "context needs a set object"})
			return true
		}
		err = c.sess.SetContext(ctx, f.Set)
	case wire.TypeComplete:
		err = c.sess.Complete(ctx)
	case wire.TypeHello:
		c.badFrame("hello was already received")
		c.Deliver(&actor.ErrorOut{Code: wire.CodeBadRequest, Message: "hello was already received"})
	default:
		msg := fmt.Sprintf("unknown frame type %q", f.Type)
		c.badFrame(msg)
		c.Deliver(&actor.ErrorOut{Code: wire.CodeBadRequest, Message: msg})
	}
	if err != nil {
		// The actor stopped (and closed this connection) or the node is
		// shutting down: the client reconnects and resumes.
		c.closeWith(wire.CloseRestart, "session moved; reconnect")
		return false
	}
	return true
}

// checkSend applies the limits on one send; it returns an error code and
// message, or "" when the send may go on.
func (c *conn) checkSend(f wire.ClientFrame) (string, string) {
	if n := utf8.RuneCountInString(f.ID); n < 1 || n > MaxSendIDLen {
		return wire.CodeBadRequest, fmt.Sprintf("send id must be 1–%d characters", MaxSendIDLen)
	}
	if f.Content == "" {
		return wire.CodeBadRequest, "content must not be empty"
	}
	if len(f.Content) > c.srv.cfg.MaxContent {
		return wire.CodeTooLarge, fmt.Sprintf("content is %d bytes, the limit is %d", len(f.Content), c.srv.cfg.MaxContent)
	}
	return "", ""
}
