package main

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/gateway/wstest"
)

// frame is any server frame (gateway/wstest).
type frame = wstest.Frame

// wsClient speaks PROTOCOL.md over a raw gorilla connection
// (gateway/wstest), with the waits these tests use.
type wsClient struct {
	*wstest.Conn
	t *testing.T
}

func dial(t *testing.T, url string) *wsClient {
	t.Helper()
	c, err := wstest.Dial(t, url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return &wsClient{Conn: c, t: t}
}

func (c *wsClient) mustWrite(v any) { c.t.Helper(); c.MustWrite(v) }

// next returns the next frame; ok is false when the connection ended.
func (c *wsClient) next(timeout time.Duration) (frame, bool) { c.t.Helper(); return c.Next(timeout) }

// expect returns the next frame and fails unless it has type typ.
func (c *wsClient) expect(typ string, timeout time.Duration) frame {
	c.t.Helper()
	return c.Expect(typ, timeout)
}

// until reads frames, passing each to seen, until match accepts one.
func (c *wsClient) until(timeout time.Duration, what string, seen func(frame), match func(frame) bool) frame {
	c.t.Helper()
	return c.Until(timeout, what, seen, match)
}

// hello sends a hello and returns the session frame.
func (c *wsClient) hello(tok, sid string, lastSeq uint64) frame {
	c.t.Helper()
	f := c.Hello(tok, sid, lastSeq, 10*time.Second)
	if f.Type != "session" {
		c.t.Fatalf("got %s, want session", f.Raw)
	}
	return f
}

// closeCode waits for the connection to end and returns the close code the
// server sent, or -1 when it ended without a close frame.
func (c *wsClient) closeCode(timeout time.Duration) int {
	c.t.Helper()
	return c.CloseCode(timeout, nil)
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
		if old.Role != f.Role || old.Content != f.Content || old.MD("call_id") != f.MD("call_id") || old.MD("status") != f.MD("status") {
			l.t.Errorf("seq %d delivered twice with different entries: %+v / %+v", f.Seq, old.Raw, f.Raw)
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
	// gorilla lets WriteControl run alongside the other writes.
	err := c.WS.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(5*time.Second))
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
			t.Errorf("server error frame: %s", f.Raw)
		}
	}
}
