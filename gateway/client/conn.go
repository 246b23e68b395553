package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/wire"
)

// dialOnce is one connection attempt, run on its own goroutine: a token,
// the WebSocket upgrade and the hello. ctx bounds all of it.
func (c *Client) dialOnce(ctx context.Context, url, sid string, last uint64) dialResult {
	res := dialResult{url: url}
	tok := c.cfg.Token
	if c.cfg.TokenFunc != nil {
		t, err := c.cfg.TokenFunc(ctx)
		if err != nil {
			res.err = fmt.Errorf("client: token: %w", err)
			return res
		}
		tok = t
	}
	ws, resp, err := c.cfg.Dialer.DialContext(ctx, url, nil)
	if err != nil {
		if resp != nil {
			err = fmt.Errorf("%w (HTTP %s)", err, resp.Status)
		}
		res.err = err
		return res
	}
	hello := wire.ClientFrame{Type: wire.TypeHello, Token: tok, SessionID: sid}
	if sid != "" {
		hello.LastSeq = last
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
// to the manager until the socket fails or the manager stops it.
func (c *Client) read(s *sock) {
	defer close(s.done)
	ws := s.ws
	ws.SetPingHandler(func(data string) error {
		_ = ws.SetReadDeadline(time.Now().Add(c.cfg.ReadTimeout))
		// A failed pong shows up as a failed read soon enough.
		_ = ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.cfg.WriteTimeout))
		return nil
	})
	for {
		_ = ws.SetReadDeadline(time.Now().Add(c.cfg.ReadTimeout))
		ev := event{s: s}
		_, data, err := ws.ReadMessage()
		if err == nil {
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

// decode parses one server frame. Frames the client does not use (delta,
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
