package gateway

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/gateway/internal/cork"
	"github.com/tether-dev/tether/gateway/wire"
)

// conn is one client WebSocket. Its reader goroutine (serve, read.go)
// owns the protocol state and the session handle. What the client is sent
// is encoded when it is delivered and queued as bytes, within a byte
// budget; a writer goroutine, which exists only while there is something
// to write, puts everything queued on the wire with one write. An idle
// connection costs no goroutine (its socket is parked in the server's
// poller, and its reader is started again when the client sends
// something), no buffer and no timer (the server's reaper watches its
// heartbeat).
type conn struct {
	srv     *Server
	ws      *websocket.Conn
	cork    *cork.Conn    // nil when the listener was not the server's
	limiter *rate.Limiter // nil: no limit
	rbuf    *[]byte       // the pooled buffer of the frame being handled (reader only)
	// opened is when the socket was upgraded: the hello deadline counts
	// from it, and nothing extends it.
	opened time.Time
	// lastRead is when the client last sent anything (unix nanos); 0
	// until the hello succeeded. The reaper pings and drops on it.
	lastRead atomic.Int64
	pinged   atomic.Bool

	mu      sync.Mutex
	queue   [][]byte
	owned   []*[]byte // pooled buffers behind queued frames: given back once written
	bytes   int       // queued bytes
	final   *closeReq // the close frame to send once the queue is out
	writing bool      // a writer goroutine is running
	closing bool      // a close was requested: nothing more is queued
	stopped bool      // the writer side is finished: no writer may start
	// opening holds the writer back while the hello opens the session:
	// the session frame and the resume's history_batch then leave in one
	// write, and the client wakes once for both.
	opening bool
	ping    bool // a websocket ping is due
	// behind is set once the client fell past its byte budget: the
	// writer's blocked write is cut short, and the close frame goes out
	// in the room package cork kept for it.
	behind bool
	code   int // the close code sent, for metrics
	// lastDelta is the newest queued frame when it is a delta the writer
	// has not taken yet: the next part of the same reply is merged into
	// it, so a client slower than the parts come gets fewer, larger ones.
	lastDelta *machine.DeltaOut
	writers   sync.WaitGroup

	// Reader-owned. taken counts the messages read from gorilla (idle.go).
	taken  uint64
	sess   actor.Session
	sid    string
	userID string
}

type closeReq struct {
	code   int
	reason string
}

var (
	_ machine.Conn      = (*conn)(nil)
	_ cluster.FrameConn = (*conn)(nil)
)

func newConn(s *Server, ws *websocket.Conn) *conn {
	c := &conn{srv: s, ws: ws, opened: time.Now()}
	c.cork, _ = ws.NetConn().(*cork.Conn)
	if c.cork != nil {
		c.cork.Start(c.heard) // the upgrade is done: what follows are frames
	}
	if s.cfg.Rate > 0 {
		c.limiter = rate.NewLimiter(rate.Limit(s.cfg.Rate), 2*int(s.cfg.Rate))
	}
	return c
}

// Deliver encodes o and queues it. It never blocks: a client whose queue
// would pass the byte budget fell too far behind, and it is closed with
// 1013 once the frame being written is out (the log keeps everything).
func (c *conn) Deliver(o machine.Out) {
	if d, ok := o.(*machine.DeltaOut); ok && c.mergeDelta(d) {
		return
	}
	b, bp, err := c.encode(o)
	if err != nil {
		c.srv.log.Error("encode frame", "err", err)
		c.closeWith(wire.CloseInternal, "internal error")
		return
	}
	if e, ok := o.(*machine.ErrorOut); ok {
		c.srv.metrics.errors.WithLabelValues(e.Code).Inc()
	}
	d, _ := o.(*machine.DeltaOut)
	c.enqueue(b, bp, d)
}

// encode encodes o; the frames every send makes (its ack and entries) and
// history batches (the largest frames, a page at a time in a replay) go
// into pooled buffers, given back once written (a tenth of the server's
// garbage under load was these frames).
func (c *conn) encode(o machine.Out) ([]byte, *[]byte, error) {
	switch o.(type) {
	case *machine.EntryOut, *machine.AckOut, *machine.BatchOut:
		bp := c.srv.frames.Get().(*[]byte)
		b, err := appendOut((*bp)[:0], o)
		*bp = b
		return b, bp, err
	}
	b, err := encodeOut(o)
	return b, nil, err
}

// release gives written frames' buffers back to the pool.
func (c *conn) release(owned []*[]byte) {
	for _, bp := range owned {
		if cap(*bp) <= maxPooledFrame {
			c.srv.frames.Put(bp)
		}
	}
}

// maxPooledFrame is the largest frame buffer the pool keeps: a resume
// batch of a thousand chat entries (some 150 KB) is reused, not
// allocated again for every replay.
const maxPooledFrame = 256 << 10

// DeliverFrame queues a frame already encoded (cluster.FrameConn's).
func (c *conn) DeliverFrame(b []byte) { c.enqueue(b, nil, nil) }

// mergeDelta merges d into the queued delta it continues, if the newest
// queued frame is one.
func (c *conn) mergeDelta(d *machine.DeltaOut) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ld := c.lastDelta
	if ld == nil || c.closing || ld.Seq != d.Seq || ld.Part+1 != d.From || len(c.queue) == 0 {
		return false
	}
	merged := &machine.DeltaOut{Seq: d.Seq, From: ld.From, Part: d.Part, Text: ld.Text + d.Text}
	b, err := encodeOut(merged)
	if err != nil {
		return false
	}
	last := len(c.queue) - 1
	c.bytes += len(b) - len(c.queue[last])
	c.queue[last], c.lastDelta = b, merged
	return true
}

// enqueue queues frame b; bp, when not nil, is its pooled buffer.
func (c *conn) enqueue(b []byte, bp *[]byte, d *machine.DeltaOut) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.lastDelta = d
	if c.bytes+len(b) > c.srv.cfg.MaxQueueBytes && c.bytes > 0 {
		// Drop what waits: it is all in the log, and the client resumes.
		c.queue, c.owned = nil, nil
		c.closing, c.behind = true, true
		c.final = &closeReq{wire.CloseTryAgain, "client fell too far behind; resume to get the rest"}
		c.srv.metrics.slow.Inc()
		if c.writing && c.cork != nil {
			_ = c.cork.SetWriteDeadline(time.Now()) // the writer is stuck behind a client that does not read
		}
	} else {
		if c.queue == nil {
			c.queue = make([][]byte, 0, 4) // a send's ack and entries: one allocation
		}
		c.queue = append(c.queue, b)
		c.bytes += len(b)
		if bp != nil {
			c.owned = append(c.owned, bp)
		}
	}
	c.kick()
}

// Close is machine.Conn's: it maps why to the close code.
func (c *conn) Close(why machine.CloseReason, msg string) {
	c.closeWith(closeCode(why), msg)
}

func closeCode(why machine.CloseReason) int {
	switch why {
	case machine.CloseCompleted:
		return wire.CloseNormal
	case machine.CloseSuperseded:
		return wire.CloseSuperseded
	case machine.CloseInternal:
		return wire.CloseInternal
	case machine.CloseUnavailable:
		return wire.CloseTryAgain
	}
	return wire.CloseRestart
}

// closeWith queues a close frame after whatever is already queued.
func (c *conn) closeWith(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.closing = true
	c.final = &closeReq{code, reason}
	c.kick()
}

// fail reports a protocol error to the client and closes with code.
func (c *conn) fail(code, msg string, closeCode int) {
	c.Deliver(&machine.ErrorOut{Code: code, Message: msg})
	c.closeWith(closeCode, msg)
}

// sendPing sends a websocket ping (the reaper's heartbeat). To a
// connection with no writer running and nothing queued it is written at
// once, on the reaper's goroutine (package cork: TryWrite): one heartbeat
// to thousands of quiet connections would otherwise start as many writer
// goroutines at once, whose stacks the runtime gives back to the OS only
// slowly after they exit. When the socket cannot take it at once, the
// writer sends it as any frame.
func (c *conn) sendPing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.stopped {
		return
	}
	if c.cork != nil && !c.writing && len(c.queue) == 0 {
		c.writing = true // the writer's role: no writer starts meanwhile
		c.writers.Add(1)
		c.mu.Unlock()
		ping := [2]byte{0x80 | websocket.PingMessage, 0} // final, empty, unmasked
		sent, err := c.cork.TryWrite(ping[:])
		c.mu.Lock()
		c.writing = false
		c.writers.Done()
		if err != nil {
			// Part of the ping is out: the client stopped reading. As
			// stalled does, its next frame is the close (after the rest).
			c.queue, c.owned, c.closing = nil, nil, true
			if c.final == nil {
				c.final = &closeReq{wire.CloseTryAgain, "client stopped reading; resume to get the rest"}
				c.srv.metrics.slow.Inc()
			}
			c.kick()
			return
		}
		if sent {
			if len(c.queue) > 0 || c.final != nil {
				c.kick() // queued while the ping was written
			}
			return
		}
	}
	c.ping = true
	c.kick()
}

// kick starts a writer if none runs. Called with mu held.
func (c *conn) kick() {
	if c.writing || c.stopped || c.opening {
		return
	}
	c.writing = true
	c.writers.Add(1)
	c.srv.workers.Go(c.writeLoop) // on a grown stack, as readFrames
}

// holdWrites holds the writer back (kick starts none) until it is
// called again with false, which starts one for what was queued.
func (c *conn) holdWrites(hold bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opening = hold
	if !hold && (len(c.queue) > 0 || c.final != nil || c.ping) {
		c.kick()
	}
}

func (c *conn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// stopWriting ends the writer side for good.
func (c *conn) stopWriting() {
	c.mu.Lock()
	c.stopped, c.closing, c.writing = true, true, false
	c.queue, c.owned, c.bytes, c.final = nil, nil, 0, nil
	c.mu.Unlock()
}

func (c *conn) writeLoop() {
	defer c.writers.Done()
	for {
		c.mu.Lock()
		frames, owned, final, ping := c.queue, c.owned, c.final, c.ping
		// The bytes stay counted until they are written: the budget
		// covers what is on its way out too.
		c.queue, c.owned, c.ping, c.lastDelta = nil, nil, false, nil
		if len(frames) == 0 && final == nil && !ping {
			c.writing = false
			c.mu.Unlock()
			return
		}
		if final != nil {
			c.final = nil
		}
		c.mu.Unlock()
		err := c.writeFrames(frames, ping)
		c.release(owned)
		if err != nil {
			c.stalled(err)
			return
		}
		n := 0
		for _, b := range frames {
			n += len(b)
		}
		c.mu.Lock()
		c.bytes = max(c.bytes-n, 0)
		c.mu.Unlock()
		if final != nil {
			c.writeClose(*final)
			c.stopWriting()
			return
		}
	}
}

// stalled ends the writer after a failed write. A client that stopped
// reading (the write's deadline passed, or the byte budget cut it short)
// still gets its close frame, 1013 unless another close was asked for:
// package cork kept room for it. Any other failure drops the socket.
func (c *conn) stalled(err error) {
	if c.cork == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		c.ws.Close()
		c.stopWriting()
		return
	}
	c.mu.Lock()
	final := c.final
	if final == nil {
		final = &closeReq{wire.CloseTryAgain, "client stopped reading; resume to get the rest"}
		c.srv.metrics.slow.Inc()
	}
	c.queue, c.owned, c.final, c.closing = nil, nil, nil, true
	c.mu.Unlock()
	c.writeClose(*final)
	c.stopWriting()
}

// writeFrames puts frames (and a ping) on the wire with one write.
func (c *conn) writeFrames(frames [][]byte, ping bool) error {
	deadline := time.Now().Add(c.srv.cfg.WriteTimeout)
	var err error
	if c.cork == nil {
		_ = c.ws.SetWriteDeadline(deadline)
		if ping {
			err = c.ws.WriteControl(websocket.PingMessage, nil, deadline)
		}
		for _, b := range frames {
			if err != nil {
				break
			}
			err = c.ws.WriteMessage(websocket.TextMessage, b)
		}
	} else {
		// Gorilla still writes the ping; the frames are framed into the
		// same buffer after it (package cork), and the deadline is set once
		// for the one write.
		c.cork.Cork()
		if ping {
			err = c.ws.WriteControl(websocket.PingMessage, nil, deadline)
		}
		if err == nil {
			c.cork.Text(frames)
			c.mu.Lock() // enqueue cuts a write short under mu (behind)
			if c.behind {
				deadline = time.Now()
			}
			err = c.cork.SetWriteDeadline(deadline)
			c.mu.Unlock()
		}
		if uerr := c.cork.Uncork(); err == nil {
			err = uerr
		}
	}
	return err
}

// writeClose sends the close frame, then gives the peer closeGrace to
// answer before the reader stops waiting.
func (c *conn) writeClose(cr closeReq) {
	c.mu.Lock()
	answered := c.code != 0 // the client closed first and has our answer
	if !answered {
		c.code = cr.code
	}
	c.mu.Unlock()
	if answered {
		return
	}
	deadline := time.Now().Add(c.srv.cfg.WriteTimeout)
	if c.cork != nil {
		if err := c.cork.Finish(deadline); err != nil {
			c.ws.Close()
			return
		}
	}
	msg := websocket.FormatCloseMessage(cr.code, truncateReason(cr.reason))
	if err := c.ws.WriteControl(websocket.CloseMessage, msg, deadline); err != nil {
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
