package wstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Frame is any server frame; which fields are set depends on Type.
type Frame struct {
	Type string `json:"type"`
	// session
	SessionID string         `json:"session_id"`
	Resumed   bool           `json:"resumed"`
	Reason    string         `json:"reason"`
	Status    string         `json:"status"`
	LastSeq   uint64         `json:"last_seq"` // session and history_batch
	WindowS   float64        `json:"window_s"`
	Context   map[string]any `json:"context"`
	Pending   map[string]any `json:"pending_tool_call"`
	// message, ack
	Seq       uint64         `json:"seq"`
	ID        string         `json:"id"`
	Role      string         `json:"role"`
	Content   string         `json:"content"`
	Timestamp float64        `json:"timestamp"`
	Metadata  map[string]any `json:"metadata"`
	// history_batch
	Messages []Frame `json:"messages"`
	FirstSeq uint64  `json:"first_seq"`
	Omitted  uint64  `json:"omitted"`
	Summary  *string `json:"summary"`
	// error
	Code    string `json:"code"`
	Message string `json:"message"`
	// delta
	Part int    `json:"part"`
	From *int   `json:"from"`
	Text string `json:"text"`

	// Raw is the frame as it came (for a history_batch's messages, each
	// message's own JSON).
	Raw string `json:"-"`
}

// MD returns the string metadata value under key ("" if none).
func (f Frame) MD(key string) string { s, _ := f.Metadata[key].(string); return s }

// Conn is one connection. Writes are serialised; reads come from Frames
// (or the helpers that wait on it) in the order the server sent them.
type Conn struct {
	URL string
	WS  *websocket.Conn

	t      testing.TB
	frames chan Frame
	wmu    sync.Mutex
	done   chan struct{} // closed when the reader stopped
	quit   chan struct{} // closed by the test's cleanup: the reader stops waiting
	err    error         // why reading ended; read after done
}

// Dial connects to url. The test's cleanup closes the connection and
// waits for its reader.
func Dial(t testing.TB, url string) (*Conn, error) { return DialVia(t, url, nil) }

// DialVia is Dial with the TCP connection made by netDial (nil: the
// default), e.g. from inside a network namespace (bench/netns).
func DialVia(t testing.TB, url string, netDial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Conn, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, NetDialContext: netDial}
	ws, resp, err := d.Dial(url, nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	c := &Conn{URL: url, WS: ws, t: t, frames: make(chan Frame, 1<<14), done: make(chan struct{}), quit: make(chan struct{})}
	t.Cleanup(func() {
		close(c.quit)
		ws.Close()
		<-c.done
	})
	go c.read()
	return c, nil
}

func (c *Conn) read() {
	// done closes before frames: whoever sees frames closed may ask Err.
	defer close(c.frames)
	defer close(c.done)
	for {
		_, data, err := c.WS.ReadMessage()
		if err != nil {
			c.err = err
			return
		}
		f, err := decode(data)
		if err != nil {
			c.err = err
			return
		}
		select {
		case c.frames <- f:
		case <-c.quit:
			return
		}
	}
}

func decode(data []byte) (Frame, error) {
	var f Frame
	if err := json.Unmarshal(data, &f); err != nil {
		return f, fmt.Errorf("bad frame %q: %w", data, err)
	}
	f.Raw = string(data)
	if len(f.Messages) > 0 {
		var b struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if json.Unmarshal(data, &b) == nil && len(b.Messages) == len(f.Messages) {
			for i := range f.Messages {
				f.Messages[i].Raw = string(b.Messages[i])
			}
		}
	}
	return f, nil
}

// Frames are the server's frames; the channel closes when the connection
// ends (Err says why).
func (c *Conn) Frames() <-chan Frame { return c.frames }

// Done is closed once the reader stopped.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why reading ended; valid once Done is closed.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Write sends v as a JSON text frame.
func (c *Conn) Write(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.WS.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.WS.WriteJSON(v)
}

// MustWrite is Write, failing the test on an error.
func (c *Conn) MustWrite(v any) {
	c.t.Helper()
	if err := c.Write(v); err != nil {
		c.t.Fatalf("%s: write %v: %v", c.URL, v, err)
	}
}

// Drop abandons the connection without a close handshake, as a phone
// losing signal would, and waits for the reader to stop.
func (c *Conn) Drop() {
	_ = c.WS.NetConn().Close()
	<-c.done
}

// Next returns the next frame; false once the connection ended. It fails
// the test if none comes within timeout.
func (c *Conn) Next(timeout time.Duration) (Frame, bool) {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		return f, ok
	case <-time.After(timeout):
		c.t.Fatalf("%s: no frame within %v", c.URL, timeout)
		return Frame{}, false
	}
}

// Expect returns the next frame and fails the test unless it has type typ.
func (c *Conn) Expect(typ string, timeout time.Duration) Frame {
	c.t.Helper()
	f, ok := c.Next(timeout)
	if !ok {
		c.t.Fatalf("%s: connection ended waiting for %s: %v", c.URL, typ, c.Err())
	}
	if f.Type != typ {
		c.t.Fatalf("%s: got %s, want %s", c.URL, f.Raw, typ)
	}
	return f
}

// Until reads frames, giving each to seen (if set), until match accepts
// one, which it returns.
func (c *Conn) Until(timeout time.Duration, what string, seen func(Frame), match func(Frame) bool) Frame {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("%s: connection ended waiting for %s: %v", c.URL, what, c.Err())
			}
			if seen != nil {
				seen(f)
			}
			if match(f) {
				return f
			}
		case <-deadline:
			c.t.Fatalf("%s: no %s within %v", c.URL, what, timeout)
		}
	}
}

// Hello sends a hello (a new session when sid is empty) and returns the
// server's answer: the session frame, or an error frame.
func (c *Conn) Hello(tok, sid string, lastSeq uint64, timeout time.Duration) Frame {
	c.t.Helper()
	h := map[string]any{"type": "hello", "token": tok}
	if sid != "" {
		h["session_id"], h["last_seq"] = sid, lastSeq
	}
	c.MustWrite(h)
	f, ok := c.Next(timeout)
	if !ok {
		c.t.Fatalf("%s: connection ended before the session frame: %v", c.URL, c.Err())
	}
	return f
}

// CloseCode waits for the connection to end, giving the frames that come
// meanwhile to seen (if set), and returns the close code the server sent,
// or -1 when it ended without a close frame.
func (c *Conn) CloseCode(timeout time.Duration, seen func(Frame)) int {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.frames:
			if ok {
				if seen != nil {
					seen(f)
				}
				continue
			}
			var ce *websocket.CloseError
			if errors.As(c.Err(), &ce) {
				return ce.Code
			}
			return -1
		case <-deadline:
			c.t.Fatalf("%s: connection still open %v later", c.URL, timeout)
		}
	}
}
