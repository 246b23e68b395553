package cork

import (
	"encoding/binary"
)

// An idle connection's only cost is its reader goroutine, and most of
// that is the goroutine's stack. Blocked inside gorilla's reader (frame
// parsing, bufio, the net package) the stack stays at 4 KiB; blocked one
// call below the read loop it fits in 2 KiB, which the runtime shrinks it
// to. So between messages the read loop waits for the socket to become
// readable itself (waitIdle), and only then calls into gorilla.
//
// That is safe only when gorilla's buffered reader holds nothing unread:
// otherwise a frame already buffered would wait for more bytes that may
// never come. gorilla does not say what it buffers, so the connection
// follows the frame boundaries in the bytes it hands to gorilla
// (frameTracker) and the read loop counts the messages it took: when every
// byte handed over belongs to a complete message that was taken, the
// buffer is empty. The bytes that woke the wait are taken off the socket
// then (the connection hands them to gorilla before reading more), so
// they must have been handed over too.
//
// The server's heartbeat is a WebSocket ping; a client that answers it
// with a lone pong would wake the loop and send it into gorilla to wait
// for the next message with a deep stack. waitIdle reads such a pong off
// the socket itself instead, and notes the client alive.

// frameTracker follows the client's frames in the bytes gorilla reads. It
// is used only by the connection's reader goroutine.
type frameTracker struct {
	on       bool // off until the upgrade: net/http reads the request first
	hdr      [14]byte
	hdrN     int    // header bytes of the frame in progress
	left     uint64 // payload bytes of the frame in progress still to come
	fin      bool
	op       byte
	messages uint64 // data messages whose final frame was handed over
	// clean: the bytes handed over end exactly with a message's final
	// frame (nothing partial, no control frame after it).
	clean bool
}

// start begins tracking, right after the upgrade, when nothing is buffered.
func (t *frameTracker) start() { t.on, t.clean = true, true }

// drained reports whether gorilla holds nothing unread, given how many
// messages the reader has taken from it.
func (t *frameTracker) drained(taken uint64) bool {
	return t.on && t.clean && t.messages == taken
}

func (t *frameTracker) feed(p []byte) {
	if !t.on {
		return
	}
	for len(p) > 0 {
		if t.hdrN == 0 && t.left > 0 { // in a payload
			n := uint64(len(p))
			if n > t.left {
				n = t.left
			}
			t.left -= n
			p = p[n:]
			if t.left == 0 {
				t.frameDone()
			}
			continue
		}
		t.clean = false
		t.hdr[t.hdrN] = p[0]
		t.hdrN++
		p = p[1:]
		if n, ok := headerLen(t.hdr[:t.hdrN]); ok && n == t.hdrN {
			t.fin, t.op = t.hdr[0]&0x80 != 0, t.hdr[0]&0x0f
			t.left = payloadLen(t.hdr[:t.hdrN])
			t.hdrN = 0
			if t.left == 0 {
				t.frameDone()
			}
		}
	}
}

func (t *frameTracker) frameDone() {
	// Opcodes 0-2 are data (continuation, text, binary); 8 and up control.
	if t.op <= 2 && t.fin {
		t.messages++
		t.clean = true
	}
}

// headerLen is the length of the frame header that begins with h, once h
// holds its first two bytes.
func headerLen(h []byte) (int, bool) {
	if len(h) < 2 {
		return 0, false
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 { // masked
		n += 4
	}
	return n, true
}

// payloadLen reads the payload length from a complete header.
func payloadLen(h []byte) uint64 {
	switch l := h[1] & 0x7f; l {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		return binary.BigEndian.Uint64(h[2:10])
	default:
		return uint64(l)
	}
}

// lonePong returns the length of the masked pong frame that p begins
// with, if p holds all of it.
func lonePong(p []byte) (int, bool) {
	if len(p) < 2 || p[0] != 0x8a || p[1]&0x80 == 0 {
		return 0, false
	}
	n := 6 + int(p[1]&0x7f)
	if p[1]&0x7f > 125 || len(p) < n {
		return 0, false
	}
	return n, true
}

// Start begins following the client's frames: the upgrade is done, and
// what follows are frames. alive is told of each lone pong WaitIdle reads
// off the socket (the client answered the server's ping).
func (c *Conn) Start(alive func()) {
	c.alive = alive
	c.frames.start()
	// The read deadlines net/http set while reading the request are over
	// (gorilla cleared them): the connection may park from now on.
	if fd, ok := c.fd(); ok {
		c.sock = fd
	}
	c.noPark.Store(false)
}

// Idle reports whether gorilla holds nothing unread, given how many
// messages the reader has taken from it: the next read would wait for
// the client.
func (c *Conn) Idle(taken uint64) bool {
	return len(c.pending) == 0 && c.frames.drained(taken)
}

// WaitIdle returns when the client has sent something for gorilla to
// read, or at once when gorilla may hold something unread or the socket
// cannot be waited on this way. Any error is left for the read that
// follows to report.
func (c *Conn) WaitIdle(taken uint64) {
	if !c.Idle(taken) {
		return
	}
	for {
		if err := c.waitReadable(); err != nil {
			return
		}
		// Whole pongs are dropped here, so gorilla never sees them.
		for len(c.pending) > 0 {
			n, ok := lonePong(c.pending)
			if !ok {
				break
			}
			c.consume(n)
			if c.alive != nil {
				c.alive()
			}
		}
		if len(c.pending) > 0 {
			return
		}
	}
}
