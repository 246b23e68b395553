package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/wire"
)

// attempt is what one connection attempt needs from the manager.
type attempt struct {
	url   string
	sid   string
	last  uint64
	mark  *wire.StreamMark // parts of a streamed reply held, for the hello
	token string           // a token still valid to reuse; "" asks TokenFunc
}

// dialOnce is one connection attempt, run on its own goroutine: a token,
// the WebSocket upgrade and the hello. ctx bounds all of it, so neither a
// token fetch nor a dial can outlive the attempt.
func (c *Client) dialOnce(ctx context.Context, a attempt) dialResult {
	res := dialResult{url: a.url, token: a.token}
	switch {
	case c.cfg.TokenFunc == nil:
		res.token = c.cfg.Token
	case res.token == "":
		t, err := c.cfg.TokenFunc(ctx)
		if err != nil {
			res.err = fmt.Errorf("client: getting a token: %w", err)
			return res
		}
		res.token, res.fresh = t, true
	}
	ws, resp, err := c.cfg.Dialer.DialContext(ctx, a.url, nil)
	if err != nil {
		if resp != nil {
			err = fmt.Errorf("%w (HTTP %s)", err, resp.Status)
		}
		res.err = err
		return res
	}
	hello := wire.ClientFrame{Type: wire.TypeHello, Token: res.token, SessionID: a.sid}
	if a.sid != "" {
		hello.LastSeq = a.last
		hello.Stream = a.mark
		if c.cfg.Shared {
			hello.Attach = wire.AttachShared
		}
	}
	_ = ws.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
	if err := ws.WriteJSON(hello); err != nil {
		_ = ws.Close()
		res.err = err
		return res
	}
	res.ws = ws
	return res
}

// read is a socket's reader goroutine: it decodes frames and hands them
// to the manager until the socket fails or the manager stops it. Every
// frame, and every WebSocket ping, marks the socket as heard from, which
// is what the heartbeat watches.
func (c *Client) read(s *sock) {
	defer close(s.done)
	ws := s.ws
	ws.SetPingHandler(func(data string) error {
		s.hear(c.epoch)
		// A failed pong shows up as a failed read soon enough.
		_ = ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.cfg.WriteTimeout))
		return nil
	})
	for {
		ev := event{s: s}
		_, data, err := ws.ReadMessage()
		if err == nil {
			s.hear(c.epoch)
			ev.f, err = decode(data)
		}
		ev.err = err
		select {
		case c.events <- ev:
		case <-s.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// decode parses one server frame. Frames the client does not use (pong,
// and types newer than this client) decode to nil.
func decode(data []byte) (any, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("client: bad frame from the server: %w", err)
	}
	var f any
	switch head.Type {
	case wire.TypeSession:
		f = new(wire.SessionFrame)
	case wire.TypeHistoryBatch:
		f = new(wire.HistoryBatch)
	case wire.TypeMessage:
		f = new(wire.Message)
	case wire.TypeAck:
		f = new(wire.Ack)
	case wire.TypeDelta:
		f = new(wire.Delta)
	case wire.TypeContext:
		f = new(wire.ContextFrame)
	case wire.TypeCompleted:
		f = new(wire.CompletedFrame)
	case wire.TypeError:
		f = new(wire.ErrorFrame)
	default:
		return nil, nil
	}
	if err := json.Unmarshal(data, f); err != nil {
		return nil, fmt.Errorf("client: bad %s frame from the server: %w", head.Type, err)
	}
	return f, nil
}
