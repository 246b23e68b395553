package gateway

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/gateway/wire"
)

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
		c.Deliver(&machine.ErrorOut{Code: wire.CodeRateLimited, ID: f.ID,
			Message: fmt.Sprintf("more than %g frames per second; nothing was done, send again later", c.srv.cfg.Rate)})
		return true
	}
	if bad != nil {
		c.Deliver(&machine.ErrorOut{Code: wire.CodeBadRequest, Message: bad.Error(), ID: f.ID})
		return true
	}
	var err error
	ctx := c.srv.ctx
	switch f.Type {
	case wire.TypeSend:
		if code, msg := c.checkSend(f); code != "" {
			c.Deliver(&machine.ErrorOut{Code: code, Message: msg, ID: f.ID})
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
			c.Deliver(&machine.ErrorOut{Code: wire.CodeBadRequest, Message: "approve needs a call_id and approved (true or false)"})
			return true
		}
		err = c.sess.Approve(ctx, f.CallID, *f.Approved)
	case wire.TypeHistory:
		if f.Limit < 0 {
			c.Deliver(&machine.ErrorOut{Code: wire.CodeBadRequest, Message: "limit must not be negative"})
			return true
		}
		err = c.sess.History(ctx, f.BeforeSeq, f.Limit)
	case wire.TypeContext:
		if f.Set == nil {
			c.Deliver(&machine.ErrorOut{Code: wire.CodeBadRequest, Message: "context needs a set object"})
			return true
		}
		err = c.sess.SetContext(ctx, f.Set)
	case wire.TypeComplete:
		err = c.sess.Complete(ctx)
	case wire.TypeHello:
		c.badFrame("hello was already received")
		c.Deliver(&machine.ErrorOut{Code: wire.CodeBadRequest, Message: "hello was already received"})
	default:
		msg := fmt.Sprintf("unknown frame type %q", f.Type)
		c.badFrame(msg)
		c.Deliver(&machine.ErrorOut{Code: wire.CodeBadRequest, Message: msg})
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
