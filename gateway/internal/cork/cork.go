package cork

import (
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	// Poller, when set, parks idle connections (Park): nil, they wait in
	// WaitIdle.
	Poller *Poller
}

// Accept wraps the next connection.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	// A socket that holds little unsent keeps room for a close frame
	// (Finish); where the option is missing, nothing changes.
	_ = setNotSentLimit(c, NotSentLimit)
	return &Conn{Conn: c, pool: l.Pool, poller: l.Poller, sock: -1}, nil
}

// NotSentLimit is how many bytes the kernel may hold that it has not yet
// sent (TCP_NOTSENT_LOWAT, Linux): a write blocks beyond it. A client that
// reads keeps that figure near zero, whatever its link's speed (bytes in
// flight do not count, and the send buffer still grows with the link), so
// only a client that stopped reading meets the limit, and its socket is
// then far from full: Finish can still put a close frame on it.
const NotSentLimit = 32 << 10

// errNoSocket: the connection is not a socket of this system (a TLS
// connection wraps one).
var errNoSocket = errors.New("cork: not a socket")

// ErrTorn is TryWrite's when the socket took only part of the bytes: the
// peer stopped reading, and the rest waits for Finish.
var ErrTorn = errors.New("cork: frame torn: the peer is not reading")

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
	// ends are where the gathered units (frames) end in buf, and torn is
	// what the peer lacks of the unit a failed Uncork left half written:
	// the stream is a frame short until Finish writes it. Writer only.
	ends []int
	torn []byte
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
	// Parking (park.go): the Poller, where c is in it, the reader's wake
	// function while parked, and noPark once something needs the reader.
	poller *Poller
	sock   int // the socket's descriptor, looked up once by Start; -1: none
	park   parking
	wake   func()
	noPark atomic.Bool
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
		c.ends = append(c.ends, len(c.buf)) // gorilla writes a frame a call
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
	n := 0
	for _, p := range payloads {
		n += len(p) + maxFrameHeader
	}
	c.buf = slices.Grow(c.buf, n)
	for _, p := range payloads {
		c.buf = appendTextFrame(c.buf, p)
		c.ends = append(c.ends, len(c.buf))
	}
}

// maxFrameHeader is the longest header of a server's frame.
const maxFrameHeader = 10

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

// Uncork writes what was gathered, with one write. When the write fails
// part way (its deadline passed: the peer stopped reading), the rest of
// the frame it was in is kept for Finish.
func (c *Conn) Uncork() error {
	c.mu.Lock()
	buf, ends := c.buf, c.ends
	c.corked, c.buf, c.ends = false, nil, ends[:0]
	if len(buf) > 0 {
		c.writes++
	}
	c.mu.Unlock()
	var err error
	if len(buf) > 0 {
		var n int
		n, err = c.Conn.Write(buf)
		if err != nil {
			c.tear(buf, ends, n)
		}
	}
	if cap(buf) <= 256<<10 {
		buf = buf[:0]
		c.pool.Put(&buf)
	}
	return err
}

// tear keeps what the peer lacks of the frame the write of buf stopped
// in after n bytes.
func (c *Conn) tear(buf []byte, ends []int, n int) {
	if n == 0 {
		return // no frame begun
	}
	for _, end := range ends {
		if end == n {
			return // it stopped between frames
		}
		if end > n {
			c.torn = append(c.torn[:0], buf[n:end]...)
			return
		}
	}
}

// Finish readies the socket for the connection's last frame, the close
// frame gorilla writes next: it lifts NotSentLimit, so the room the limit
// kept is the close frame's, and writes the rest of any frame a failed
// Uncork tore, by deadline, so that the close frame starts on a frame's
// boundary. Writer only.
func (c *Conn) Finish(deadline time.Time) error {
	_ = setNotSentLimit(c.Conn, 0)
	if len(c.torn) == 0 {
		return nil
	}
	torn := c.torn
	c.torn = nil
	if err := c.Conn.SetWriteDeadline(deadline); err != nil {
		return err
	}
	_, err := c.Conn.Write(torn)
	return err
}

// Writes reports how many writes reached the socket.
func (c *Conn) Writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}
