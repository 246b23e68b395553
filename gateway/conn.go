package gateway

import (
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"

	"github.com/tether-dev/tether/actor"
)

// conn is one client WebSocket. Two goroutines serve it: the reader
// (serve, read.go) owns the protocol state and the session handle; the
// writer (writeLoop) owns the socket's write side. They meet only through
// the bounded out queue and the kill channel, so a client that reads
// slowly costs at most OutQueue frames of memory.
type conn struct {
	srv     *Server
	ws      *websocket.Conn
	limiter *rate.Limiter // nil: no limit

	out  chan outItem
	kill chan closeReq // capacity 1: close now, dropping what is queued

	mu      sync.Mutex
	closing bool // a close was requested: nothing more is queued

	readerDone chan struct{}
	writerDone chan struct{}

	// Reader-owned.
	sess Session
}

type outItem struct {
	out   actor.Out
	close *closeReq
}

type closeReq struct {
	code   int
	reason string
}

var _ actor.Conn = (*conn)(nil)

func newConn(s *Server, ws *websocket.Conn) *conn {
	c := &conn{
		srv:        s,
		ws:         ws,
		out:        make(chan outItem, s.cfg.OutQueue),
		kill:       make(chan closeReq, 1),
		readerDone: make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	if s.cfg.Rate > 0 {
		c.limiter = rate.NewLimiter(rate.Limit(s.cfg.Rate), 2*int(s.cfg.Rate))
	}
	return c
}

// Deliver queues o. It never blocks: a full queue means the client fell
// too far behind, and it is closed with 1013 (the log keeps everything).
func (c *conn) Deliver(o actor.Out) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	select {
	case c.out <- outItem{out: o}:
	default:
		c.closing = true
		c.kill <- closeReq{CloseTryAgain, "client fell too far behind"}
	}
}

// Close queues a close frame after whatever is already queued.
func (c *conn) Close(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.closing = true
	select {
	case c.out <- outItem{close: &closeReq{code, reason}}:
	default:
		c.kill <- closeReq{code, reason}
	}
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

func (c *conn) writeLoop() {
	defer close(c.writerDone)
	ping := time.NewTicker(c.srv.cfg.PingInterval)
	defer ping.Stop()
	for {
		// A kill jumps the queue.
		select {
		case cr := <-c.kill:
			c.writeClose(cr)
			return
		default:
		}
		select {
		case cr := <-c.kill:
			c.writeClose(cr)
			return
		case it := <-c.out:
			if it.close != nil {
				c.writeClose(*it.close)
				return
			}
			if !c.write(it.out) {
				return
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.srv.cfg.WriteTimeout)); err != nil {
				c.ws.Close()
				return
			}
		case <-c.readerDone:
			return
		}
	}
}

func (c *conn) write(o actor.Out) bool {
	b, err := encodeOut(o)
	if err != nil {
		c.srv.log.Error("encode frame", "err", err)
		c.writeClose(closeReq{CloseInternal, "internal error"})
		return false
	}
	if e, ok := o.(*actor.ErrorOut); ok {
		c.srv.metrics.errors.WithLabelValues(e.Code).Inc()
	}
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.srv.cfg.WriteTimeout))
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
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
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
