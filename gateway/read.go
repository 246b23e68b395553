package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/gateway/wire"
)

// MaxSendIDLen is the longest client send id, in characters.
const MaxSendIDLen = 64

// serve is the reader goroutine: hello, then one frame at a time until
// the socket ends. On the way out it detaches the session, which starts
// the reconnect window.
func (c *conn) serve() {
	defer c.srv.wg.Done()
	defer c.cleanup()
	c.ws.SetReadLimit(c.srv.cfg.MaxFrame)
	c.ws.SetPongHandler(func(string) error {
		c.extendDeadline()
		return nil
	})
	_ = c.ws.SetReadDeadline(time.Now().Add(c.srv.cfg.HelloTimeout))
	if c.hello() {
		for c.next() {
		}
	}
	// Wait for the peer's answer to our close (or the grace to pass), so
	// the close handshake completes.
	for {
		if _, _, err := c.ws.ReadMessage(); err != nil {
			return
		}
	}
}

func (c *conn) cleanup() {
	c.ping.Stop()
	c.mu.Lock()
	c.stopped, c.closing = true, true
	c.mu.Unlock()
	// Give a writer that is sending our close frame (or what precedes it)
	// a moment to finish; then closing the socket unblocks one stuck on a
	// peer that does not read.
	flushed := make(chan struct{})
	go func() {
		c.writers.Wait()
		close(flushed)
	}()
	select {
	case <-flushed:
	case <-time.After(closeGrace):
	}
	c.ws.Close()
	<-flushed
	if c.sess != nil {
		c.sess.Detach()
	}
	c.srv.untrack(c)
}

func (c *conn) extendDeadline() {
	if !c.isClosing() {
		_ = c.ws.SetReadDeadline(time.Now().Add(c.srv.cfg.PongWait))
	}
}

// read returns the next client frame, or ok=false when the connection is
// done (its close has been requested already, or the socket failed).
// decodeErr is set for a frame that is JSON but not a valid frame.
func (c *conn) read() (f wire.ClientFrame, decodeErr error, ok bool) {
	mt, data, err := c.ws.ReadMessage()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && c.sess == nil && !c.isClosing() {
			c.fail(wire.CodeBadRequest, "no hello frame in time", wire.ClosePolicy)
		}
		// ErrReadLimit: gorilla has already closed with 1009.
		return f, nil, false
	}
	switch {
	case mt != websocket.TextMessage:
		c.fail(wire.CodeBadRequest, "only text frames are accepted", wire.CloseUnsupported)
		return f, nil, false
	}
	f, err = DecodeFrame(data)
	if errors.Is(err, ErrInvalidPayload) {
		c.fail(wire.CodeBadRequest, err.Error(), wire.CloseInvalidPayload)
		return f, nil, false
	}
	return f, err, true
}

// ErrInvalidPayload is a frame that is not UTF-8 or not JSON (close 1007).
var ErrInvalidPayload = errors.New("frame is not valid UTF-8 JSON")

// DecodeFrame decodes one client text frame. It reads the type first, then
// only that type's own fields: fields of other frame types are unknown
// fields here, and unknown fields are ignored whatever their JSON type.
// Errors other than ErrInvalidPayload describe a frame that is JSON but
// not a valid frame (bad_request).
func DecodeFrame(data []byte) (wire.ClientFrame, error) {
	var f wire.ClientFrame
	switch {
	case !utf8.Valid(data):
		return f, fmt.Errorf("%w: not UTF-8", ErrInvalidPayload)
	case !json.Valid(data):
		return f, fmt.Errorf("%w: not JSON", ErrInvalidPayload)
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return f, fmt.Errorf("malformed client frame: %v", err)
	}
	f.Type = head.Type
	var err error
	switch f.Type {
	case wire.TypeHello:
		var v struct {
			Token     string           `json:"token"`
			SessionID string           `json:"session_id"`
			LastSeq   uint64           `json:"last_seq"`
			Stream    *wire.StreamMark `json:"stream"`
		}
		err = json.Unmarshal(data, &v)
		f.Token, f.SessionID, f.LastSeq, f.Stream = v.Token, v.SessionID, v.LastSeq, v.Stream
	case wire.TypeSend:
		var v struct {
			ID       string         `json:"id"`
			Content  string         `json:"content"`
			Metadata map[string]any `json:"metadata"`
		}
		err = json.Unmarshal(data, &v)
		f.ID, f.Content, f.Metadata = v.ID, v.Content, v.Metadata
	case wire.TypeHistory:
		var v struct {
			BeforeSeq uint64 `json:"before_seq"`
			Limit     int    `json:"limit"`
		}
		err = json.Unmarshal(data, &v)
		f.BeforeSeq, f.Limit = v.BeforeSeq, v.Limit
	case wire.TypeContext:
		var v struct {
			Set map[string]any `json:"set"`
		}
		err = json.Unmarshal(data, &v)
		f.Set = v.Set
	case wire.TypePing:
		var v struct {
			ID string `json:"id"`
		}
		err = json.Unmarshal(data, &v)
		f.ID = v.ID
	}
	switch {
	case err != nil:
		return f, fmt.Errorf("malformed %s frame: %v", orUnknown(f.Type), err)
	case f.Type == "":
		return f, errors.New("frame has no type")
	}
	return f, nil
}

func orUnknown(t string) string {
	if t == "" {
		return "client"
	}
	return t
}

// hello handles the first frame; it reports whether a session is attached.
func (c *conn) hello() bool {
	f, bad, ok := c.read()
	if !ok {
		return false
	}
	switch {
	case bad != nil:
		c.fail(wire.CodeBadRequest, bad.Error(), wire.ClosePolicy)
		return false
	case f.Type != wire.TypeHello:
		c.fail(wire.CodeBadRequest, "the first frame must be hello", wire.ClosePolicy)
		return false
	}
	start := time.Now()
	id, err := Verify(c.srv.cfg.Secret, f.Token, c.srv.cfg.Now())
	if err != nil {
		c.fail(wire.CodeUnauthorized, err.Error(), wire.ClosePolicy)
		return false
	}
	sess, err := c.srv.cfg.Backend.Open(c.srv.ctx, actor.OpenRequest{
		SessionID: f.SessionID, UserID: id.UserID, LastSeq: f.LastSeq, AuthTime: id.AuthTime, Conn: c,
	})
	switch {
	case errors.Is(err, actor.ErrReauthRequired):
		c.fail(wire.CodeReauthRequired, "this session is sensitive: log in again to resume it", wire.CloseReauth)
		return false
	case errors.Is(err, actor.ErrBadLastSeq):
		c.fail(wire.CodeBadRequest, "last_seq is beyond the session's last seq", wire.ClosePolicy)
		return false
	case errors.Is(err, actor.ErrClosed):
		c.Close(wire.CloseRestart, "node shutting down")
		return false
	case errors.Is(err, ErrUnavailable):
		c.fail(wire.CodeUnavailable, "the session's owner cannot be reached; retry", wire.CloseTryAgain)
		return false
	case err != nil:
		c.srv.log.Error("open session", "err", err)
		c.fail(wire.CodeInternal, "could not open the session", wire.CloseInternal)
		return false
	}
	c.sess = sess
	if sess.Resumed() {
		c.srv.metrics.resume.Observe(time.Since(start).Seconds())
	}
	c.extendDeadline()
	return true
}

// next handles one frame after the hello; false ends the connection.
func (c *conn) next() bool {
	f, bad, ok := c.read()
	if !ok || c.isClosing() {
		return false
	}
	c.extendDeadline()
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
		err = c.sess.Send(ctx, f.ID, f.Content, f.Metadata)
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
	case wire.TypePing:
		b, _ := json.Marshal(wire.Pong{Type: wire.TypePong, ID: f.ID})
		c.deliverRaw(b)
	case wire.TypeHello:
		c.Deliver(&actor.ErrorOut{Code: wire.CodeBadRequest, Message: "hello was already received"})
	default:
		c.Deliver(&actor.ErrorOut{Code: wire.CodeBadRequest, Message: fmt.Sprintf("unknown frame type %q", f.Type)})
	}
	if err != nil {
		// The actor stopped (and closed this connection) or the node is
		// shutting down: the client reconnects and resumes.
		c.Close(wire.CloseRestart, "session moved; reconnect")
		return false
	}
	return true
}

// checkSend applies the limits on one send; it returns an error code and
// message, or "" when the send may go on.
func (c *conn) checkSend(f wire.ClientFrame) (string, string) {
	if c.limiter != nil && !c.limiter.Allow() {
		return wire.CodeRateLimited, fmt.Sprintf("more than %g sends per second", c.srv.cfg.Rate)
	}
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
