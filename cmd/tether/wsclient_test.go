package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// frame is any server frame; which fields are set depends on Type.
type frame struct {
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
	Messages []frame `json:"messages"`
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

	raw string
}

func (f frame) md(key string) string { s, _ := f.Metadata[key].(string); return s }

// wsClient speaks PROTOCOL.md over a raw gorilla connection. One goroutine
// reads every frame into a channel; writes are serialised.
type wsClient struct {
	t      *testing.T
	ws     *websocket.Conn
	frames chan frame
	wmu    sync.Mutex

	done    chan struct{} // closed when the reader stopped
	readErr error
}

func dial(t *testing.T, url string) *wsClient {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	c := &wsClient{t: t, ws: ws, frames: make(chan frame, 8192), done: make(chan struct{})}
	t.Cleanup(func() { ws.Close() })
	go c.readLoop()
	return c
}

func (c *wsClient) readLoop() {
	defer close(c.done)
	defer close(c.frames)
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			c.readErr = err
			return
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			c.readErr = fmt.Errorf("bad frame %q: %w", data, err)
			return
		}
		f.raw = string(data)
		if len(f.Messages) > 0 {
			var b struct {
				Messages []json.RawMessage `json:"messages"`
			}
			if json.Unmarshal(data, &b) == nil && len(b.Messages) == len(f.Messages) {
				for i := range f.Messages {
					f.Messages[i].raw = string(b.Messages[i])
				}
			}
		}
		c.frames <- f
	}
}

func (c *wsClient) write(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.ws.WriteJSON(v)
}

func (c *wsClient) mustWrite(v any) {
	c.t.Helper()
	if err := c.write(v); err != nil {
		c.t.Fatalf("write %v: %v", v, err)
	}
}

// next returns the next frame; ok is false when the connection ended.
func (c *wsClient) next(timeout time.Duration) (frame, bool) {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		return f, ok
	case <-time.After(timeout):
		c.t.Fatalf("no frame within %v", timeout)
		return frame{}, false
	}
}

// expect returns the next frame and fails unless it has type typ.
func (c *wsClient) expect(typ string, timeout time.Duration) frame {
	c.t.Helper()
	f, ok := c.next(timeout)
	if !ok {
		c.t.Fatalf("connection ended waiting for %s: %v", typ, c.readErr)
	}
	if f.Type != typ {
		c.t.Fatalf("got %s, want %s", f.raw, typ)
	}
	return f
}

// until reads frames, passing each to seen, until match accepts one.
func (c *wsClient) until(timeout time.Duration, what string, seen func(frame), match func(frame) bool) frame {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("connection ended waiting for %s: %v", what, c.readErr)
			}
			if seen != nil {
				seen(f)
			}
			if match(f) {
				return f
			}
		case <-deadline:
			c.t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

// hello sends a hello and returns the session frame.
func (c *wsClient) hello(tok, sid string, lastSeq uint64) frame {
	c.t.Helper()
	h := map[string]any{"type": "hello", "token": tok}
	if sid != "" {
		h["session_id"] = sid
		h["last_seq"] = lastSeq
	}
	c.mustWrite(h)
	return c.expect("session", 10*time.Second)
}

// closeCode waits for the connection to end and returns the close code the
// server sent, or -1 when it ended without a close frame.
func (c *wsClient) closeCode(timeout time.Duration) int {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-c.frames:
			if ok {
				continue
			}
			var ce *websocket.CloseError
			if errors.As(c.readErr, &ce) {
				return ce.Code
			}
			return -1
		case <-deadline:
			c.t.Fatalf("connection still open %v later", timeout)
		}
	}
}

// log collects message entries by seq, whether they come live or in a
// history_batch, and notices a seq delivered twice with different data.
type entryLog struct {
	t       *testing.T
	bySeq   map[uint64]frame
	maxLive uint64
}

func newEntryLog(t *testing.T) *entryLog { return &entryLog{t: t, bySeq: make(map[uint64]frame)} }

func (l *entryLog) add(f frame) {
	l.t.Helper()
	if old, ok := l.bySeq[f.Seq]; ok {
		if old.Role != f.Role || old.Content != f.Content || old.md("call_id") != f.md("call_id") || old.md("status") != f.md("status") {
			l.t.Errorf("seq %d delivered twice with different entries: %+v / %+v", f.Seq, old.raw, f.raw)
		}
		return
	}
	l.bySeq[f.Seq] = f
}

// observe is a wsClient.until callback: it records message frames (and
// checks that live ones come in gap-free order) and batch contents.
func (l *entryLog) observe(f frame) {
	l.t.Helper()
	switch f.Type {
	case "message":
		if l.maxLive != 0 && f.Seq != l.maxLive+1 {
			l.t.Errorf("live message seq %d after %d: not gap-free", f.Seq, l.maxLive)
		}
		l.maxLive = f.Seq
		l.add(f)
	case "history_batch":
		for _, m := range f.Messages {
			l.add(m)
		}
	}
}

// contiguous checks that seqs 1..max are all present and returns max.
func (l *entryLog) contiguous() uint64 {
	l.t.Helper()
	var hi uint64
	for s := range l.bySeq {
		hi = max(hi, s)
	}
	for s := uint64(1); s <= hi; s++ {
		if _, ok := l.bySeq[s]; !ok {
			l.t.Errorf("seq %d missing (have up to %d)", s, hi)
		}
	}
	return hi
}

// pageAll pages the session's log back from before to seq 1 with
// history requests of limit entries, checking each page.
func (c *wsClient) pageAll(l *entryLog, before uint64, limit int) {
	c.t.Helper()
	for before > 1 {
		c.mustWrite(map[string]any{"type": "history", "before_seq": before, "limit": limit})
		b := c.until(10*time.Second, "history_batch", l.observe, func(f frame) bool { return f.Type == "history_batch" })
		if len(b.Messages) == 0 {
			c.t.Fatalf("empty history page before seq %d", before)
		}
		if len(b.Messages) > limit {
			c.t.Errorf("history page of %d entries, limit %d", len(b.Messages), limit)
		}
		for i, m := range b.Messages {
			if want := b.FirstSeq + uint64(i); m.Seq != want {
				c.t.Fatalf("history page before %d: entry %d has seq %d, want %d", before, i, m.Seq, want)
			}
		}
		if b.LastSeq != before-1 {
			c.t.Fatalf("history page before %d ends at %d", before, b.LastSeq)
		}
		before = b.FirstSeq
	}
}

// closeNormal starts the close handshake with 1000 and waits for the
// server's answer.
func (c *wsClient) closeNormal() {
	c.t.Helper()
	c.wmu.Lock()
	err := c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(5*time.Second))
	c.wmu.Unlock()
	if err != nil {
		c.t.Fatalf("close: %v", err)
	}
	if code := c.closeCode(10 * time.Second); code != websocket.CloseNormalClosure {
		c.t.Fatalf("server answered our close with %d, want 1000", code)
	}
}

func sendFrame(id, content string) map[string]any {
	return map[string]any{"type": "send", "id": id, "content": content}
}

// replyTo is the seq an agent or tool entry answers.
func replyTo(f frame) uint64 {
	n, _ := f.Metadata["reply_to"].(float64)
	return uint64(n)
}

// chat sends one message and waits for its ack and for the agent's reply;
// it returns both entries' seqs.
func (c *wsClient) chat(id, content string) (userSeq, replySeq uint64) {
	c.t.Helper()
	c.mustWrite(sendFrame(id, content))
	ack := c.until(10*time.Second, "ack "+id, failOnError(c.t), func(f frame) bool { return f.Type == "ack" && f.ID == id })
	reply := c.until(10*time.Second, "agent reply", failOnError(c.t), func(f frame) bool {
		return f.Type == "message" && f.Role == "agent" && replyTo(f) == ack.Seq
	})
	return ack.Seq, reply.Seq
}

func failOnError(t *testing.T) func(frame) {
	return func(f frame) {
		t.Helper()
		if f.Type == "error" {
			t.Errorf("server error frame: %s", f.raw)
		}
	}
}
