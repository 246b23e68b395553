package cork

import (
	"encoding/binary"
	"net"
	"sync"

	"github.com/gorilla/websocket"
)

// Listener wraps every accepted connection in a Conn, so that a
// connection's writer can put several WebSocket frames on the wire with
// one write: gorilla writes each frame to the socket as it ends it, and
// the socket is the only place to gather them.
type Listener struct {
	net.Listener
	// Pool holds *[]byte gathering buffers: an idle connection holds none.
	Pool *sync.Pool
}

// Accept wraps the next connection.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, pool: l.Pool}, nil
}

// Unwrap returns the connection under c when c is a Conn, c otherwise.
func Unwrap(c net.Conn) net.Conn {
	if cc, ok := c.(*Conn); ok {
		return cc.Conn
	}
	return c
}

// Conn passes writes straight through, except between cork and
// uncork, when it gathers them and writes them at uncork in one go. Only
// the connection's one writer goroutine corks.
type Conn struct {
	net.Conn
	pool   *sync.Pool
	mu     sync.Mutex
	corked bool
	buf    []byte
	// writes counts the writes that reached the socket (tests).
	writes int
	// frames follows what gorilla reads (idle.go); reader goroutine only.
	frames frameTracker
	// alive is told of each lone pong WaitIdle reads off the socket.
	alive func()
	// pending are bytes waitReadable took off the socket, for gorilla to
	// read first; they live in pendBuf, a pooled buffer given back once
	// they are read. Reader goroutine only.
	pending []byte
	pendBuf *[]byte
}

// Read hands gorilla's reader what waitReadable took, then reads the
// socket; either way the frame tracker is fed what gorilla takes.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.frames.feed(p[:n])
		c.consume(n)
		return n, nil
	}
	n, err := c.Conn.Read(p)
	c.frames.feed(p[:n])
	return n, err
}

// consume drops the first n pending bytes, giving the buffer back once
// none are left.
func (c *Conn) consume(n int) {
	c.pending = c.pending[n:]
	if len(c.pending) == 0 && c.pendBuf != nil {
		c.pool.Put(c.pendBuf)
		c.pending, c.pendBuf = nil, nil
	}
}

func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.corked {
		c.buf = append(c.buf, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.writes++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Cork gathers writes until Uncork. Only the connection's writer corks.
func (c *Conn) Cork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		c.corked = true
		c.buf = (*c.pool.Get().(*[]byte))[:0]
	}
}

// Text gathers each payload as one unfragmented, unmasked text frame:
// the frames a server sends, framed here rather than by gorilla, which
// takes a pooled buffer, splits messages larger than it into fragments and
// sets the socket's write deadline again for every frame. Corked only.
func (c *Conn) Text(payloads [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range payloads {
		c.buf = appendTextFrame(c.buf, p)
	}
}

// appendTextFrame appends p framed as a final text frame (RFC 6455 5.2).
func appendTextFrame(b, p []byte) []byte {
	const finText = 0x80 | websocket.TextMessage
	switch n := len(p); {
	case n < 126:
		b = append(b, finText, byte(n))
	case n <= 0xffff:
		b = append(b, finText, 126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, finText, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, p...)
}

// Uncork writes what was gathered, with one write.
func (c *Conn) Uncork() error {
	c.mu.Lock()
	buf := c.buf
	c.corked, c.buf = false, nil
	if len(buf) > 0 {
		c.writes++
	}
	c.mu.Unlock()
	var err error
	if len(buf) > 0 {
		_, err = c.Conn.Write(buf)
	}
	if cap(buf) <= 256<<10 {
		buf = buf[:0]
		c.pool.Put(&buf)
	}
	return err
}

// Writes reports how many writes reached the socket.
func (c *Conn) Writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}
