package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/vmihailenco/msgpack/v5"
)

// reply is the outcome of a call: a body, the peer's error, or err when
// the connection went down first.
type reply struct {
	body   msgpack.RawMessage
	remote *RemoteError
	err    error
}

// conn is one authenticated WebSocket to a peer: a reader goroutine that
// never blocks (it only hands frames over), a writer goroutine that sends
// everything queued as one WebSocket message, and the calls and streams
// multiplexed over it by id.
type conn struct {
	l    *Link
	ws   *websocket.Conn
	peer string // the peer's authenticated node id
	addr string // the address dialed; "" for an accepted connection

	out   chan frame    // frames in order (calls, replies, stream values)
	ctrl  chan struct{} // wakes the writer for ctrlQ
	ids   atomic.Uint64
	idBit uint64 // 1 on the dialing side, 0 on the accepting one: ids never collide

	done     chan struct{}
	downOnce sync.Once
	err      error // why it went down; set before done is closed

	mu      sync.Mutex
	ctrlQ   []frame // resets and cancels, which must not block their sender
	calls   map[uint64]chan reply
	streams map[uint64]*Stream
	serving map[uint64]context.CancelFunc
}

func newConn(l *Link, ws *websocket.Conn, peer, addr string) *conn {
	c := &conn{
		l: l, ws: ws, peer: peer, addr: addr,
		out:     make(chan frame, l.cfg.QueueSize),
		ctrl:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		calls:   make(map[uint64]chan reply),
		streams: make(map[uint64]*Stream),
		serving: make(map[uint64]context.CancelFunc),
	}
	if addr != "" {
		c.idBit = 1
	}
	ws.SetReadLimit(int64(l.cfg.MaxFrame) + maxBatchBytes + 1024)
	return c
}

// maxBatchBytes is where the writer stops adding frames to one message.
const maxBatchBytes = 1 << 20

func (c *conn) nextID() uint64 { return c.ids.Add(1)<<1 | c.idBit }

func (c *conn) isDown() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// down fails the connection once: pending calls and open streams get err,
// running Serves are cancelled, the Link forgets it.
func (c *conn) down(err error) {
	c.downOnce.Do(func() {
		c.err = err
		close(c.done)
		c.ws.Close()
		c.mu.Lock()
		calls, streams, serving := c.calls, c.streams, c.serving
		c.calls, c.streams, c.serving = map[uint64]chan reply{}, map[uint64]*Stream{}, map[uint64]context.CancelFunc{}
		c.mu.Unlock()
		for _, ch := range calls {
			ch <- reply{err: err}
		}
		for _, s := range streams {
			s.end(err)
		}
		for _, cancel := range serving {
			cancel()
		}
		c.l.dropped(c)
		if !errors.Is(err, ErrClosed) {
			c.l.log.Info("link connection lost", "peer", c.peer, "addr", c.addr, "err", err)
		}
	})
}

// closeGracefully tells the peer, then fails everything with ErrClosed.
func (c *conn) closeGracefully() {
	msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, "link closed")
	_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	c.down(ErrClosed)
}

// send queues f in order, waiting while the queue is full.
func (c *conn) send(ctx context.Context, f frame) error {
	select {
	case <-c.done:
		return c.err
	default:
	}
	select {
	case c.out <- f:
		return nil
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendCtrl queues f ahead of the ordered frames, never blocking.
func (c *conn) sendCtrl(f frame) {
	c.mu.Lock()
	c.ctrlQ = append(c.ctrlQ, f)
	c.mu.Unlock()
	select {
	case c.ctrl <- struct{}{}:
	default:
	}
}

func (c *conn) call(ctx context.Context, method Op, body msgpack.RawMessage) (reply, error) {
	id := c.nextID()
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.isDown() {
		c.mu.Unlock()
		return reply{}, c.err
	}
	c.calls[id] = ch
	c.mu.Unlock()
	var wait int64 // ms, rounded up: the peer's deadline must not come first
	if dl, ok := ctx.Deadline(); ok {
		wait = max(int64((time.Until(dl)+time.Millisecond-1)/time.Millisecond), 1)
	}
	if err := c.send(ctx, frame{T: frameCall, ID: id, M: string(method), B: body, D: wait}); err != nil {
		c.forget(id)
		return reply{}, err
	}
	select {
	case r := <-ch:
		if r.remote != nil && ctx.Err() != nil {
			return reply{}, ctx.Err() // the peer's Serve ran out of our time
		}
		return r, r.err
	case <-ctx.Done():
		c.forget(id)
		c.sendCtrl(frame{T: frameCancel, ID: id})
		return reply{}, ctx.Err()
	}
}

func (c *conn) forget(id uint64) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

func (c *conn) open(ctx context.Context, method Op, body msgpack.RawMessage) (*Stream, error) {
	s := newStream(c, c.nextID(), method)
	c.mu.Lock()
	if c.isDown() {
		c.mu.Unlock()
		return nil, c.err
	}
	c.streams[s.id] = s
	c.mu.Unlock()
	if err := c.send(ctx, frame{T: frameOpen, ID: s.id, M: string(method), B: body}); err != nil {
		c.removeStream(s.id)
		s.end(err)
		return nil, err
	}
	return s, nil
}

func (c *conn) removeStream(id uint64) *Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[id]
	delete(c.streams, id)
	return s
}

// readLoop decodes frames and hands each over without blocking.
func (c *conn) readLoop() {
	idle := 3 * c.l.cfg.PingInterval
	alive := func(string) error { return c.ws.SetReadDeadline(time.Now().Add(idle)) }
	c.ws.SetPongHandler(alive)
	c.ws.SetPingHandler(func(data string) error {
		_ = alive(data)
		err := c.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.writeWait()))
		if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
			return err
		}
		return nil
	})
	br := bufio.NewReaderSize(nil, 16<<10)
	dec := msgpack.NewDecoder(nil)
	for {
		_ = alive("")
		mt, r, err := c.ws.NextReader()
		if err != nil {
			if c.l.ctx.Err() != nil {
				// This side is closing: the peer's answer to our close
				// frame may come before closeGracefully marks the end.
				err = ErrClosed
			} else {
				err = readError(err)
			}
			c.down(err)
			return
		}
		if mt != websocket.BinaryMessage {
			c.down(fmt.Errorf("%w: unexpected message type %d", ErrLinkDown, mt))
			return
		}
		br.Reset(r)
		dec.Reset(br)
		for {
			var f frame
			if err := f.decode(dec); err == io.EOF {
				break
			} else if err != nil {
				c.down(fmt.Errorf("%w: bad frame from %s: %w", ErrLinkDown, c.peer, err))
				return
			}
			c.dispatch(f)
		}
	}
}

func readError(err error) error {
	var ce *websocket.CloseError
	if errors.As(err, &ce) && ce.Code == websocket.ClosePolicyViolation {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	return fmt.Errorf("%w: %w", ErrLinkDown, err)
}

func (c *conn) writeWait() time.Duration { return max(3*c.l.cfg.PingInterval, 5*time.Second) }

// writeLoop writes whatever is queued as one WebSocket message, and pings.
func (c *conn) writeLoop() {
	ping := time.NewTicker(c.l.cfg.PingInterval)
	defer ping.Stop()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	batch := make([]frame, 0, 64)
	for {
		batch = batch[:0]
		select {
		case <-c.done:
			return
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.writeWait())); err != nil {
				c.down(fmt.Errorf("%w: ping: %w", ErrLinkDown, err))
				return
			}
			continue
		case f := <-c.out:
			batch = append(batch, f)
		case <-c.ctrl:
		}
		c.mu.Lock()
		batch = append(batch, c.ctrlQ...)
		c.ctrlQ = c.ctrlQ[:0]
		c.mu.Unlock()
		buf.Reset()
		if err := c.fill(enc, &buf, batch); err != nil {
			c.down(fmt.Errorf("%w: encode frame: %w", ErrLinkDown, err))
			return
		}
		_ = c.ws.SetWriteDeadline(time.Now().Add(c.writeWait()))
		if err := c.ws.WriteMessage(websocket.BinaryMessage, buf.Bytes()); err != nil {
			c.down(fmt.Errorf("%w: write: %w", ErrLinkDown, err))
			return
		}
		if buf.Cap() > 4*maxBatchBytes { // one huge frame must not pin its buffer
			buf = bytes.Buffer{}
		}
	}
}

// fill encodes batch, then whatever else is queued, up to maxBatch frames
// or maxBatchBytes.
func (c *conn) fill(enc *msgpack.Encoder, buf *bytes.Buffer, batch []frame) error {
	for i := range batch {
		if err := batch[i].encode(enc); err != nil {
			return err
		}
	}
	for n := len(batch); n < c.l.cfg.maxBatch && buf.Len() < maxBatchBytes; n++ {
		select {
		case f := <-c.out:
			if err := f.encode(enc); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

func (c *conn) dispatch(f frame) {
	switch f.T {
	case frameCall:
		c.serve(f)
	case frameCancel:
		c.mu.Lock()
		cancel := c.serving[f.ID]
		c.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	case frameReply:
		c.mu.Lock()
		ch := c.calls[f.ID]
		delete(c.calls, f.ID)
		c.mu.Unlock()
		if ch != nil { // else the caller gave up
			r := reply{body: f.B}
			if f.E != "" || f.C != "" {
				r = reply{remote: &RemoteError{Code: f.C, Message: f.E}}
			}
			ch <- r
		}
	case frameOpen:
		c.accept(f)
	case frameData:
		c.mu.Lock()
		s := c.streams[f.ID]
		c.mu.Unlock()
		if s != nil && !s.push(f.B) {
			c.removeStream(f.ID)
			s.end(ErrOverflow)
			c.sendCtrl(frame{T: frameReset, ID: f.ID, E: "receiver overflowed", C: codeOverflow})
			c.l.log.Warn("stream overflowed; reset", "peer", c.peer, "method", s.method, "buffer", c.l.cfg.StreamBuffer)
		}
	case frameFin:
		if s := c.removeStream(f.ID); s != nil {
			s.end(io.EOF)
		}
	case frameReset:
		if s := c.removeStream(f.ID); s != nil {
			s.end(resetError(f))
		}
	default:
		c.l.log.Debug("unknown frame type ignored", "peer", c.peer, "type", f.T)
	}
}

const codeOverflow = "overflow"

func resetError(f frame) error {
	if f.C == codeOverflow {
		return fmt.Errorf("%w by peer: %w", ErrReset, ErrOverflow)
	}
	return fmt.Errorf("%w by peer: %s", ErrReset, f.E)
}

// serve runs the Link's Serve for an incoming call on its own goroutine.
func (c *conn) serve(f frame) {
	ctx, cancel := context.WithCancel(c.l.ctx)
	if f.D > 0 {
		ctx, cancel = context.WithTimeout(c.l.ctx, time.Duration(f.D)*time.Millisecond)
	}
	c.mu.Lock()
	c.serving[f.ID] = cancel
	c.mu.Unlock()
	started := c.l.goSafe(func() {
		defer func() {
			c.mu.Lock()
			delete(c.serving, f.ID)
			c.mu.Unlock()
			cancel()
		}()
		r := frame{T: frameReply, ID: f.ID}
		resp, err := c.handle(ctx, f)
		if err == nil {
			r.B, err = c.l.encode(resp)
		}
		if err != nil {
			r.B, r.E, r.C = nil, err.Error(), ErrorCode(err)
			if r.E == "" {
				r.E = "error"
			}
		}
		if ctx.Err() != nil {
			return // the caller gave up, or this Link is closing: nobody waits
		}
		_ = c.send(ctx, r)
	})
	if !started {
		c.mu.Lock()
		delete(c.serving, f.ID)
		c.mu.Unlock()
		cancel()
	}
}

func (c *conn) handle(ctx context.Context, f frame) (any, error) {
	if c.l.cfg.Serve == nil {
		return nil, WithCode("unavailable", errors.New("this node serves no calls"))
	}
	return c.l.cfg.Serve(ctx, c.peer, Op(f.M), f.B)
}

// accept registers an incoming stream and runs the Link's Accept for it.
func (c *conn) accept(f frame) {
	if c.l.cfg.Accept == nil {
		c.sendCtrl(frame{T: frameReset, ID: f.ID, E: "this node accepts no streams"})
		return
	}
	s := newStream(c, f.ID, Op(f.M))
	c.mu.Lock()
	if c.isDown() {
		c.mu.Unlock()
		return
	}
	c.streams[f.ID] = s
	c.mu.Unlock()
	if !c.l.goSafe(func() { c.l.cfg.Accept(c.peer, Op(f.M), f.B, s) }) {
		c.removeStream(f.ID)
		s.end(ErrClosed)
	}
}
