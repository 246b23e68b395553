package node_test

// A client speaking PROTOCOL.md over a raw WebSocket (gateway/wstest),
// and a ledger that checks what every client of a session saw against the
// session's log.

import (
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway/wstest"
)

// frame is any server frame (gateway/wstest).
type frame = wstest.Frame

// wsc is one connection, with the waits these tests use (all bounded by
// waitFor).
type wsc struct {
	*wstest.Conn
	t    testing.TB
	last uint64 // the newest seq this connection was shown, see follow
}

// dial connects to a node's WebSocket.
func dial(t testing.TB, n *tnode) *wsc {
	t.Helper()
	c, err := dialURL(t, n.URL())
	if err != nil {
		t.Fatalf("dial %s: %v", n.id, err)
	}
	return c
}

func dialURL(t testing.TB, url string) (*wsc, error) {
	c, err := wstest.Dial(t, url)
	if err != nil {
		return nil, err
	}
	return &wsc{Conn: c, t: t}, nil
}

// until reads frames, giving each to seen, until match accepts one.
func (c *wsc) until(what string, seen func(frame), match func(frame) bool) frame {
	c.t.Helper()
	return c.Until(waitFor, what, seen, match)
}

// hello sends a hello (a new session when sid is empty) and returns the
// server's answer: the session frame, or the error frame.
func (c *wsc) hello(tok, sid string, lastSeq uint64) frame {
	c.t.Helper()
	return c.Hello(tok, sid, lastSeq, waitFor)
}

// follow returns a wsc.until callback that records frames in l and
// checks that this connection is shown entries gap-free and in order: a
// history_batch starting right after what it was shown before (from
// c.last, set to the hello's last_seq), live messages one after another.
func (c *wsc) follow(l *ledger) func(frame) {
	return func(f frame) {
		c.t.Helper()
		switch f.Type {
		case "history_batch":
			if len(f.Messages) > 0 && f.FirstSeq != c.last+1 {
				c.t.Errorf("%s: history_batch from seq %d after seq %d", c.URL, f.FirstSeq, c.last)
			}
			if len(f.Messages) > 0 {
				c.last = f.LastSeq
			}
		case "message":
			if f.Seq != c.last+1 {
				c.t.Errorf("%s: message seq %d after seq %d: not gap-free", c.URL, f.Seq, c.last)
			}
			c.last = f.Seq
		case "error":
			if l == nil || !l.allowed(f.Code) {
				c.t.Errorf("%s: error frame %s", c.URL, f.Raw)
			}
		}
		if l != nil {
			l.observe(f)
		}
	}
}

func sendFrame(id, content string) map[string]any {
	return map[string]any{"type": "send", "id": id, "content": content}
}

// ledger is what the clients of one session were told: every entry by
// seq (whether live or replayed) and every ack. check compares it with
// the session's whole log.
type ledger struct {
	t     testing.TB
	mu    sync.Mutex
	seen  map[uint64]frame
	acked map[string]uint64 // send id → seq
	allow map[string]bool   // error codes the test expects
}

// expect makes an error frame with code no failure.
func (l *ledger) expect(code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.allow == nil {
		l.allow = map[string]bool{}
	}
	l.allow[code] = true
}

func (l *ledger) allowed(code string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allow[code]
}

func newLedger(t testing.TB) *ledger {
	return &ledger{t: t, seen: map[uint64]frame{}, acked: map[string]uint64{}}
}

// observe records one frame; it is a wsc.until callback.
func (l *ledger) observe(f frame) {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch f.Type {
	case "message":
		l.entry(f)
	case "history_batch":
		for _, m := range f.Messages {
			l.entry(m)
		}
	case "ack":
		if old, ok := l.acked[f.ID]; ok && old != f.Seq {
			l.t.Errorf("send %s acked as seq %d and as seq %d", f.ID, old, f.Seq)
		}
		l.acked[f.ID] = f.Seq
	}
}

func (l *ledger) entry(f frame) {
	if old, ok := l.seen[f.Seq]; ok && !sameEntry(old, f) {
		l.t.Errorf("seq %d shown as two entries: %s / %s", f.Seq, old.Raw, f.Raw)
		return
	}
	l.seen[f.Seq] = f
}

func sameEntry(a, b frame) bool {
	return a.Role == b.Role && a.Content == b.Content && a.MD("id") == b.MD("id") &&
		a.MD("call_id") == b.MD("call_id") && a.MD("status") == b.MD("status")
}

// check holds the session's whole log (from a resume at 0) against what
// the clients were shown: the log is gap-free from 1, every entry shown
// is in it at its seq, and every acked send is the user entry at its
// acked seq. It returns the log's last seq.
func (l *ledger) check(log []frame) uint64 {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	bySeq := map[uint64]frame{}
	for i, e := range log {
		if e.Seq != uint64(i+1) {
			l.t.Fatalf("the log is not gap-free: entry %d has seq %d", i, e.Seq)
		}
		bySeq[e.Seq] = e
	}
	for seq, f := range l.seen {
		if e, ok := bySeq[seq]; !ok || !sameEntry(e, f) {
			l.t.Errorf("seq %d was shown as %s; the log has %s", seq, f.Raw, e.Raw)
		}
	}
	for id, seq := range l.acked {
		if e, ok := bySeq[seq]; !ok || e.Role != "user" || e.MD("id") != id {
			l.t.Errorf("send %s was acked as seq %d; the log has %s there (last seq %d): an acked entry was lost",
				id, seq, e.Raw, len(log))
		}
	}
	return uint64(len(log))
}

// wholeLog resumes sid at 0 through n (the resume batch holds the whole
// log: the nodes replay up to 1000 entries) and returns its entries; the
// connection is closed after.
func wholeLog(t testing.TB, n *tnode, tok, sid string) []frame {
	t.Helper()
	var c *wsc
	var s frame
	for deadline := time.Now().Add(waitFor); ; {
		c = dial(t, n)
		if s = c.hello(tok, sid, 0); s.Type != "error" || s.Code != "unavailable" || time.Now().After(deadline) {
			break
		}
		c.Drop() // the cluster is settling: retry, as a client would
		time.Sleep(50 * time.Millisecond)
	}
	defer c.Drop()
	if s.Type != "session" || !s.Resumed {
		t.Fatalf("resume %s via %s: %s", sid, n.id, s.Raw)
	}
	b := c.until("history_batch", nil, func(f frame) bool { return f.Type == "history_batch" })
	log := b.Messages
	for len(log) > 0 && log[0].Seq > 1 { // more than one batch holds: page back
		if err := c.Write(map[string]any{"type": "history", "before_seq": log[0].Seq, "limit": 200}); err != nil {
			t.Fatal(err)
		}
		h := c.until("history page", nil, func(f frame) bool { return f.Type == "history_batch" })
		if len(h.Messages) == 0 {
			t.Fatalf("empty history page before seq %d", log[0].Seq)
		}
		log = append(h.Messages, log...)
	}
	if uint64(len(log)) != s.LastSeq {
		t.Fatalf("resume at 0 and history pages hold %d entries, the session %d", len(log), s.LastSeq)
	}
	return log
}
