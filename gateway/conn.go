package gateway

import (
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/gateway/wire"
)

// conn is one client WebSocket. Its reader goroutine (serve, read.go)
// owns the protocol state and the session handle. Writes go through a
// bounded queue drained by a writer goroutine that exists only while there
// is something to write, so an idle connection costs one goroutine. A
// client that reads too slowly costs at most OutQueue queued frames.
type conn struct {
	srv     *Server
	ws      *websocket.Conn
	limiter *rate.Limiter // nil: no limit
	ping    *time.Timer

	mu      sync.Mutex
	queue   []outItem
	kill    *closeReq // a close that jumps the queue, dropping it
	writing bool      // a writer goroutine is running
	closing bool      // a close was requested: nothing more is queued
	stopped bool      // the writer side is finished: no writer may start
	writers sync.WaitGroup

	// Reader-owned.
	sess Session
}

type outItem struct {
	out   actor.Out
	raw   []byte // a frame already encoded (pong)
	close *closeReq
	ping  bool
}

type closeReq struct {
	code   int
	reason string
}

var _ actor.Conn = (*conn)(nil)

func newConn(s *Server, ws *websocket.Conn) *conn {
	c := &conn{srv: s, ws: ws}
	if s.cfg.Rate > 0 {
		c.limiter = rate.NewLimiter(rate.Limit(s.cfg.Rate), 2*int(s.cfg.Rate))
	}
	c.ping = time.AfterFunc(s.cfg.PingInterval, c.sendPing)
	return c
}

// Deliver queues o. It never blocks: a full queue means the client fell
// too far behind, and it is closed with 1013 (the log keeps everything).
func (c *conn) Deliver(o actor.Out) { c.enqueue(outItem{out: o}) }

// deliverRaw queues a frame the gateway itself answers (pong).
func (c *conn) deliverRaw(b []byte) { c.enqueue(outItem{raw: b}) }

func (c *conn) enqueue(it outItem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	if len(c.queue) >= c.srv.cfg.OutQueue {
		c.closing = true
		c.kill = &closeReq{wire.CloseTryAgain, "client fell too far behind"}
	} else {
		c.queue = append(c.queue, it)
	}
	c.kick()
}

// Close queues a close frame after whatever is already queued.
func (c *conn) Close(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.closing = true
	c.queue = append(c.queue, outItem{close: &closeReq{code, reason}})
	c.kick()
}

// sendPing runs on the ping timer: an idle connection is pinged so a dead
// peer is noticed (its pong, or any frame, extends the read deadline).
func (c *conn) sendPing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.closing {
		return
	}
	if !c.writing && len(c.queue) == 0 {
		c.queue = append(c.queue, outItem{ping: true})
		c.kick()
	}
	c.ping.Reset(c.srv.cfg.PingInterval)
}

// kick starts a writer if none runs. Called with mu held.
func (c *conn) kick() {
	if c.writing || c.stopped {
		return
	}
	c.writing = true
	c.writers.Add(1)
	go c.writeLoop()
}

func (c *conn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// fail reports a protocol error to the client and closes with code.
func (c *conn) fail(code, msg string, closeCode int) {
	c.Deliver(&actor.ErrorOut{Code: code, Message: msg})
	c.Close(closeCode, msg)
}

// stopWriting ends the writer side for good.
func (c *conn) stopWriting() {
	c.mu.Lock()
	c.stopped, c.closing, c.writing = true, true, false
	c.queue, c.kill = nil, nil
	c.mu.Unlock()
}

func (c *conn) writeLoop() {
	defer c.writers.Done()
	for {
		c.mu.Lock()
		var it outItem
		switch {
		case c.kill != nil:
			it = outItem{close: c.kill}
		case len(c.queue) > 0:
			it = c.queue[0]
			c.queue[0] = outItem{}
			if c.queue = c.queue[1:]; len(c.queue) == 0 {
				c.queue = nil // an idle connection keeps no buffer
			}
		default:
			c.writing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if it.close != nil {
			c.writeClose(*it.close)
			c.stopWriting()
			return
		}
		if !c.write(it) {
			c.stopWriting()
			return
		}
	}
}

func (c *conn) write(it outItem) bool {
	deadline := time.Now().Add(c.srv.cfg.WriteTimeout)
	if it.ping {
		if err := c.ws.WriteControl(websocket.PingMessage, nil, deadline); err != nil {
			c.ws.Close()
			return false
		}
		return true
	}
	b, err := it.raw, error(nil)
	if b == nil {
		b, err = encodeOut(it.out)
	}
	if err != nil {
		c.srv.log.Error("encode frame", "err", err)
		c.writeClose(closeReq{wire.CloseInternal, "internal error"})
		return false
	}
	if e, ok := it.out.(*actor.ErrorOut); ok {
		c.srv.metrics.errors.WithLabelValues(e.Code).Inc()
	}
	_ = c.ws.SetWriteDeadline(deadline)
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		// The peer is gone or stuck past the write timeout: drop it.
		c.ws.Close()
		return false
	}
	return true
}

// writeClose sends the close frame, then gives the peer closeGrace to
// answer before the reader stops waiting.
func (c *conn) writeClose(cr closeReq) {
	msg := websocket.FormatCloseMessage(cr.code, truncateReason(cr.reason))
	if err := c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(c.srv.cfg.WriteTimeout)); err != nil {
		c.ws.Close()
		return
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(closeGrace))
}

// closeGrace is how long a peer has to answer our close frame.
const closeGrace = 2 * time.Second

// truncateReason keeps a close reason within the 123 bytes a control
// frame allows.
func truncateReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
