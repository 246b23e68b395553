package node_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// writer is a client that keeps one send in flight on its session, the
// load of the membership-change tests. When its connection ends it
// resumes at the last seq it saw through the node pick names, and sends
// the unacked message again with the same id. It runs on its own
// goroutine, so it reports with Errorf, never Fatal.
type writer struct {
	t    testing.TB
	name string
	tok  string
	l    *ledger
	pick func(attempt int) *tnode // the node of each (re)connection

	mu       sync.Mutex
	sid      string
	last     uint64
	acks     int
	closes   []int    // close codes of the connections the server ended
	through  []string // node of each attached connection
	refused  []string // why the last attempts to resume failed
	refusals int
	stopped  bool
	draining bool // stop once no send is unacked, see drain
	cur      *wsc // the connection being written on

	kick chan struct{} // acks came: wake waiters
	done chan struct{}
}

// startWriter creates a session through pick(0) and starts writing.
func startWriter(t testing.TB, name string, pick func(int) *tnode) *writer {
	t.Helper()
	w := &writer{t: t, name: name, tok: token(t, name), l: newLedger(t), pick: pick, kick: make(chan struct{}, 1), done: make(chan struct{})}
	n := pick(0)
	c, s := newSession(t, n, w.tok)
	w.l.observe(s)
	w.sid = s.SessionID
	w.through = append(w.through, n.id)
	w.cur = c
	t.Cleanup(w.stop) // before the nodes close (cleanups run last first)
	go w.run(c)
	return w
}

func (w *writer) run(c *wsc) {
	defer close(w.done)
	next := 0
	pending := ""
	for attempt := 1; ; attempt++ {
		if c != nil {
			var code int
			next, pending, code = w.write(c, next, pending)
			w.mu.Lock()
			stop := w.stopped || w.draining && pending == ""
			if code != 0 && !stop {
				w.closes = append(w.closes, code)
			}
			w.mu.Unlock()
			if stop {
				return
			}
		}
		c = w.reconnect(attempt)
		if c == nil {
			return
		}
	}
}

// reconnect resumes the session through the next node, trying until it
// is attached or the writer is stopped (then nil).
func (w *writer) reconnect(attempt int) *wsc {
	for ; ; attempt++ {
		w.mu.Lock()
		stop, last := w.stopped, w.last
		w.mu.Unlock()
		if stop {
			return nil
		}
		n := w.pick(attempt)
		c, err := dialURL(w.t, n.URL())
		if err == nil {
			if err = w.hello(c, last); err == nil {
				w.mu.Lock()
				w.through = append(w.through, n.id)
				w.cur = c
				stop := w.stopped
				w.mu.Unlock()
				if stop {
					c.Drop()
					return nil
				}
				return c
			}
			c.Drop()
		}
		w.mu.Lock()
		w.refusals++
		w.refused = append(w.refused, err.Error())
		if len(w.refused) > 3 {
			w.refused = w.refused[1:] // the last few tell enough
		}
		w.mu.Unlock()
		time.Sleep(50 * time.Millisecond) // a client's backoff between attempts
	}
}

// hello resumes on c and reads up to the history_batch.
func (w *writer) hello(c *wsc, last uint64) error {
	c.last = last
	if err := c.Write(map[string]any{"type": "hello", "token": w.tok, "session_id": w.sid, "last_seq": last}); err != nil {
		return err
	}
	for {
		f, err := w.frame(c)
		if err != nil {
			return err
		}
		switch {
		case f.Type == "error":
			return fmt.Errorf("%s: %s", f.Code, f.Message) // unavailable: retry elsewhere
		case f.Type == "session":
			w.l.observe(f) // the Verifier holds last_seq against what the writer saw
			if !f.Resumed {
				w.t.Errorf("%s: session %s not resumed: %s", w.name, w.sid, f.Raw)
				return errors.New("not resumed")
			}
		case f.Type == "history_batch":
			c.follow(w.l)(f)
			w.setLast(c.last)
			return nil
		}
	}
}

// frame reads one frame (a slow server is a failure after waitFor).
func (w *writer) frame(c *wsc) (frame, error) {
	select {
	case f, ok := <-c.Frames():
		if !ok {
			return frame{}, c.Err()
		}
		return f, nil
	case <-time.After(waitFor):
		return frame{}, errors.New("no frame in time")
	}
}

// write sends until the connection ends or the writer is stopped; it
// returns the next message number, the id still unacked and the close
// code (0 when the writer closed it).
func (w *writer) write(c *wsc, next int, pending string) (int, string, int) {
	follow := c.follow(w.l)
	for {
		if pending == "" {
			if w.quitting() {
				c.Drop()
				return next, "", 0
			}
			pending = fmt.Sprintf("%s-%d", w.name, next)
			next++
			time.Sleep(pace) // a person typing, not a flood
		}
		if err := c.Write(sendFrame(pending, "message "+pending)); err != nil {
			return next, pending, w.closed(c)
		}
		for acked := false; !acked; {
			f, err := w.frame(c)
			if err != nil {
				return next, pending, w.closed(c)
			}
			follow(f)
			w.setLast(c.last)
			if f.Type == "ack" && f.ID == pending {
				acked, pending = true, ""
				w.mu.Lock()
				w.acks++
				w.mu.Unlock()
				select {
				case w.kick <- struct{}{}:
				default:
				}
			}
		}
	}
}

// closed waits for c's end and returns the server's close code (-1: none).
// A connection still open (the server stopped answering) is dropped.
func (w *writer) closed(c *wsc) int {
	select {
	case <-c.Done():
	case <-time.After(time.Second):
		w.t.Logf("%s (session %s, after seq %d): no answer in %v on %s; dropping the connection", w.name, w.sid, c.last, waitFor, c.URL)
		c.Drop()
	}
	for range c.Frames() {
	}
	var ce *websocket.CloseError
	if errors.As(c.Err(), &ce) {
		return ce.Code
	}
	return -1
}

func (w *writer) setLast(s uint64) {
	w.mu.Lock()
	w.last = max(w.last, s)
	w.mu.Unlock()
}

// quitting reports whether the writer is to send nothing more.
func (w *writer) quitting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped || w.draining
}

func (w *writer) ackCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acks
}

// waitAcks waits until the writer has n acks in all.
func (w *writer) waitAcks(n int) {
	w.t.Helper()
	deadline := time.After(waitFor)
	for w.ackCount() < n {
		select {
		case <-w.kick:
		case <-w.done:
			w.t.Fatalf("%s stopped at %d acks, waiting for %d", w.name, w.ackCount(), n)
		case <-deadline:
			w.mu.Lock()
			msg := fmt.Sprintf("%s (session %s): %d acks after %v, want %d (closes %v, through %v, %d resumes refused, the last: %v; last seq seen %d)",
				w.name, w.sid, w.acks, waitFor, n, w.closes, w.through, w.refusals, w.refused, w.last)
			w.mu.Unlock()
			w.t.Fatal(msg + "\n" + w.nodesSay())
		}
	}
}

// nodesSay is what each node the writer may use holds of its session:
// for a failure's message.
func (w *writer) nodesSay() string {
	var out []string
	seen := map[*tnode]bool{}
	for a := range 8 {
		n := w.pick(a)
		if n == nil || seen[n] {
			continue
		}
		seen[n] = true
		h, ok := header(n, w.sid)
		out = append(out, fmt.Sprintf("%s: owns %v, actor %v, copy %v last seq %d epoch %d owner %q status %s",
			n.id, n.Cluster.Owns(w.sid), slices.Contains(n.Registry.ActiveIDs(), w.sid), ok, h.LastSeq, h.Epoch, h.Owner, h.Status))
	}
	return strings.Join(out, "\n")
}

// pace is the pause between a writer's ack and its next send.
const pace = 10 * time.Millisecond

// drain makes the writer end once it has no send unacked (resending
// one through a new connection if need be); <-w.done says it has. Then
// every send it made is stored, and the turn the last one started shows
// in its session's header until it is answered: stop may leave a send on
// its way to the owner, stored after anyone looked.
func (w *writer) drain() {
	w.mu.Lock()
	w.draining = true
	w.mu.Unlock()
}

// stop ends the writer (its send in flight may or may not be acked).
// Safe to call twice.
func (w *writer) stop() {
	w.mu.Lock()
	w.stopped = true
	c := w.cur
	w.mu.Unlock()
	if c != nil {
		_ = c.WS.NetConn().Close()
	}
	<-w.done
}

// via is the node the writer's connection i was attached through.
func (w *writer) via(i int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.through[i]
}

// closeCodes returns the close codes the server sent this writer.
func (w *writer) closeCodes() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.closes...)
}
