package gateway

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/gateway/wire"
)

// MaxSendIDLen is the longest client send id, in characters.
const MaxSendIDLen = 64

// serve is the reader goroutine: hello, then one frame at a time until
// the socket ends. On the way out it detaches the session, which starts
// the reconnect window.
func (c *conn) serve() {
	c.ws.SetReadLimit(c.srv.cfg.MaxFrame)
	c.ws.SetCloseHandler(c.peerClosed)
	if !c.hello() {
		c.finish()
		return
	}
	// The heartbeat counts only once the client proved who it is: before
	// that, the hello deadline alone applies (the reaper).
	c.lastRead.Store(time.Now().UnixNano())
	c.ws.SetPongHandler(func(string) error {
		c.heard()
		return nil
	})
	// The hello grew this goroutine's stack (token checks, opening the
	// session); an idle connection's reader should not keep that: the
	// frames are read by a fresh goroutine from here on.
	go c.readLoop()
}

// readLoop waits for the client's next frames after the hello, and
// again whenever the client has nothing more buffered. Where it can, it
// does not wait on a goroutine at all: it parks the socket in the
// server's poller (package cork: Park), which wakes it on a worker when
// the client sends something; an idle connection then costs no stack.
// Where it cannot (no poller, TLS, a read deadline set), a fresh
// goroutine waits on a small stack (package cork: WaitIdle): handling a
// frame grows a stack (decoding, the actor's mailbox) to a size the
// runtime never shrinks back to its minimum.
//
// Handling frames runs on one of the server's parked goroutines
// (workers.Pool), whose stack has grown already: a fresh goroutine would
// grow its own, copying it at each doubling, for every burst.
func (c *conn) readLoop() {
	if c.cork != nil {
		if c.cork.Park(c.taken, c.woken) {
			return
		}
		c.cork.WaitIdle(c.taken)
	}
	c.srv.workers.Go(c.readFrames)
}

// woken is called by the poller, on its goroutine, when a parked
// connection's client sent something (or the connection needs its
// reader); it must not block, and until it hands over it is the
// connection's reader. A lone pong (the answer to the heartbeat) is
// taken right there and the connection parks again: thousands of clients
// answering one heartbeat would otherwise each start a goroutine at once.
// Anything else is read on a worker.
func (c *conn) woken() {
	if !c.cork.Ready(c.taken) && c.cork.Park(c.taken, c.woken) {
		return
	}
	c.srv.workers.Go(c.readWoken)
}

// readWoken reads what woke the connection.
func (c *conn) readWoken() {
	c.cork.WaitIdle(c.taken) // at once unless it could not park again
	c.readFrames()
}

// readFrames handles the frames the client has sent until it has sent
// no more, then hands the wait for the next ones to a fresh readLoop.
func (c *conn) readFrames() {
	for {
		mt, data, err := c.readMessage()
		ok := c.next(mt, data, err)
		c.releaseRead()
		if !ok {
			break
		}
		if c.cork != nil && c.cork.Idle(c.taken) {
			go c.readLoop()
			return
		}
	}
	c.finish()
}

// readMessage reads the next message from gorilla, counting it. The
// message is read into a pooled buffer, which releaseRead gives back once
// the frame is handled (decoding copies what it keeps); gorilla's
// ReadMessage allocated one per frame.
func (c *conn) readMessage() (int, []byte, error) {
	mt, r, err := c.ws.NextReader()
	if err != nil {
		return mt, nil, err
	}
	bp := c.srv.bufs.Get().(*[]byte)
	c.rbuf = bp
	b := (*bp)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return mt, nil, err
		}
	}
	*bp = b
	c.taken++
	return mt, b, nil
}

// releaseRead gives the buffer of the last message read back to the pool.
func (c *conn) releaseRead() {
	if bp := c.rbuf; bp != nil {
		c.rbuf = nil
		if cap(*bp) <= 64<<10 {
			*bp = (*bp)[:0]
			c.srv.bufs.Put(bp)
		}
	}
}

// finish waits out the close handshake and cleans up.
func (c *conn) finish() {
	defer c.srv.wg.Done()
	defer c.cleanup()
	// Wait for the peer's answer to our close (or the grace to pass), so
	// the close handshake completes.
	for {
		if _, _, err := c.ws.ReadMessage(); err != nil {
			break
		}
	}
	c.mu.Lock()
	tooBig := c.code == wire.CloseTooBig
	c.mu.Unlock()
	if tooBig {
		// The rest of the oversized frame is still coming: read it away, or
		// closing with it unread resets the connection and the client
		// never sees our 1009.
		_ = c.ws.NetConn().SetReadDeadline(time.Now().Add(closeGrace))
		_, _ = io.Copy(io.Discard, c.ws.NetConn())
	}
}

// peerClosed answers the client's close frame. The code is recorded
// before the answer goes out: once the client has our answer it may
// reconnect at once, and that resume detaches this connection (4001)
// before the reader returns; without this, the 1000 the client actually
// ended with would be counted and logged as 4001. If our own close went
// out first, the client's frame is the answer to it and needs none.
func (c *conn) peerClosed(code int, _ string) error {
	c.mu.Lock()
	ours := c.code != 0
	if !ours {
		c.code = code
	}
	c.mu.Unlock()
	if ours {
		return nil
	}
	msg := websocket.FormatCloseMessage(code, "")
	_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(c.srv.cfg.WriteTimeout)) // the peer may be gone already
	return nil
}

// heard notes that the client is alive.
func (c *conn) heard() {
	c.lastRead.Store(time.Now().UnixNano())
	c.pinged.Store(false)
}

func (c *conn) cleanup() {
	c.mu.Lock()
	c.closing = true
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
	case <-time.After(c.srv.cfg.WriteTimeout + closeGrace):
	}
	c.mu.Lock()
	c.stopped = true
	code := c.code
	c.mu.Unlock()
	c.ws.Close()
	<-flushed
	if c.sess != nil {
		c.sess.Detach()
	}
	if code == 0 {
		code = 1006 // the socket ended without our close frame
	}
	c.srv.metrics.closes.WithLabelValues(fmt.Sprint(code)).Inc()
	c.srv.log.Debug("connection closed", "session", c.sid, "code", code)
	c.srv.untrack(c)
}

// read returns the next client frame, or ok=false when the connection is
// done (its close has been requested already, or the socket failed).
// decodeErr is set for a frame that is JSON but not a valid frame.
func (c *conn) read(mt int, data []byte, err error) (f wire.ClientFrame, decodeErr error, ok bool) {
	if err != nil {
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			// The client closed; gorilla has answered with its code, so
			// that is the code this connection ended with (not 1006).
			c.mu.Lock()
			if c.code == 0 {
				c.code = ce.Code
			}
			c.mu.Unlock()
		}
		if errors.Is(err, websocket.ErrReadLimit) {
			c.badFrame(fmt.Sprintf("frame larger than the limit of %d bytes", c.srv.cfg.MaxFrame))
			c.mu.Lock()
			c.code = wire.CloseTooBig // gorilla has sent the close frame
			c.mu.Unlock()
		}
		return f, nil, false
	}
	if mt != websocket.TextMessage {
		c.badFrame("binary frame")
		c.fail(wire.CodeBadRequest, "only text frames are accepted", wire.CloseUnsupported)
		return f, nil, false
	}
	f, err = DecodeFrame(data)
	if err != nil {
		c.badFrame(err.Error())
	}
	if errors.Is(err, ErrInvalidPayload) {
		c.fail(wire.CodeBadRequest, err.Error(), wire.CloseInvalidPayload)
		return f, nil, false
	}
	return f, err, true
}

// badFrame logs a frame the server refused (debug: a client's mistake,
// not the node's).
func (c *conn) badFrame(why string) {
	c.srv.log.Debug("bad frame", "session", c.sid, "err", why)
}
