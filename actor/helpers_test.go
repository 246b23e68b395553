package actor

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/wal"
)

// waitTimeout bounds every wait of the integration tests.
const waitTimeout = 10 * time.Second

// recConn records what the actor tells a client. Deliver and Close never
// block: they append under a mutex and poke a notify channel.
type recConn struct {
	name   string
	mu     sync.Mutex
	outs   []Out
	closes []int
	read   int // outs consumed by next
	notify chan struct{}
}

func newRecConn(name string) *recConn {
	return &recConn{name: name, notify: make(chan struct{}, 1)}
}

func (c *recConn) Deliver(o Out) {
	c.mu.Lock()
	c.outs = append(c.outs, o)
	c.mu.Unlock()
	c.poke()
}

func (c *recConn) Close(code int, _ string) {
	c.mu.Lock()
	c.closes = append(c.closes, code)
	c.mu.Unlock()
	c.poke()
}

func (c *recConn) poke() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *recConn) String() string { return c.name }

// waitUntil waits until cond (called with c.mu held) is true.
func (c *recConn) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.notify:
		case <-deadline.C:
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("%s: timed out waiting for %s; got outs %s, closes %v", c.name, what, dumpOuts(c.outs), c.closes)
		}
	}
}

// next returns the next frame not yet consumed, waiting for it.
func (c *recConn) next(t *testing.T) Out {
	t.Helper()
	c.waitUntil(t, "a frame", func() bool { return len(c.outs) > c.read })
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.outs[c.read]
	c.read++
	return o
}

// unread returns the frames delivered but not consumed yet.
func (c *recConn) unread() []Out {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.outs[c.read:])
}

func (c *recConn) all() []Out {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.outs)
}

func (c *recConn) closeCodes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.closes)
}

func (c *recConn) waitClosed(t *testing.T, code int) {
	t.Helper()
	c.waitUntil(t, fmt.Sprintf("close %d", code), func() bool { return slices.Contains(c.closes, code) })
}

// expect returns the next frame, which must be a T.
func expect[T Out](t *testing.T, c *recConn) T {
	t.Helper()
	o := c.next(t)
	v, ok := o.(T)
	if !ok {
		var z T
		t.Fatalf("%s: got %s, want %T", c.name, dumpOuts([]Out{o}), z)
	}
	return v
}

func dumpOuts(outs []Out) string {
	s := "["
	for i, o := range outs {
		if i > 0 {
			s += ", "
		}
		switch o := o.(type) {
		case *EntryOut:
			s += fmt.Sprintf("entry{%d %s %q %v}", o.Entry.Seq, o.Entry.Role, o.Entry.Content, o.Entry.Metadata["status"])
		case *BatchOut:
			s += fmt.Sprintf("batch{seqs %v omitted %d}", seqsOf(o.Messages), o.Omitted)
		default:
			s += fmt.Sprintf("%T%+v", o, o)
		}
	}
	return s + "]"
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, waitTimeout, what, cond)
}

func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

// ---- log and registry ----

func openLog(t *testing.T, dir string) *wal.Log {
	t.Helper()
	l, err := wal.New(wal.Config{Dir: dir, SweepInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatalf("wal.New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("wal close: %v", err)
		}
	})
	return l
}

// newRegistry starts a registry on l. Its cleanup is registered after the
// log's, so it runs first: the registry closes before its log.
func newRegistry(t *testing.T, l *wal.Log, cfg Config) *Registry {
	t.Helper()
	cfg.Journal = l
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("registry close: %v", err)
		}
	})
	return r
}

// setup opens a log in a fresh directory and a registry on it.
func setup(t *testing.T, cfg Config) (*Registry, *wal.Log, string) {
	t.Helper()
	dir := t.TempDir()
	l := openLog(t, dir)
	return newRegistry(t, l, cfg), l, dir
}

func open(t *testing.T, r *Registry, req OpenRequest) *Handle {
	t.Helper()
	h, err := r.Open(t.Context(), req)
	if err != nil {
		t.Fatalf("Open(%q as %s): %v", req.SessionID, req.UserID, err)
	}
	return h
}

// openNew opens a new session for user and consumes its session frame.
func openNew(t *testing.T, r *Registry, user string, c *recConn) *Handle {
	t.Helper()
	h := open(t, r, OpenRequest{UserID: user, Conn: c})
	so := expect[*SessionOut](t, c)
	if h.Reason != ReasonNew || so.Reason != ReasonNew || so.SessionID != h.SessionID {
		t.Fatalf("new session: handle %+v, frame %+v", h, so)
	}
	return h
}

// chat sends text with the Echo engine and checks the ack, the user entry
// and the reply; it returns the user entry's seq.
func chat(t *testing.T, h *Handle, c *recConn, id, text string) uint64 {
	t.Helper()
	if err := h.Send(t.Context(), id, text, nil); err != nil {
		t.Fatalf("Send: %v", err)
	}
	ack := expect[*AckOut](t, c)
	user := expect[*EntryOut](t, c).Entry
	reply := expect[*EntryOut](t, c).Entry
	if ack.ID != id || user.Seq != ack.Seq || user.Role != RoleUser || user.Content != text || mdString(user, "id") != id {
		t.Fatalf("send %s: ack %+v, entry %+v", id, ack, user)
	}
	if reply.Seq != user.Seq+1 || reply.Role != RoleAgent || reply.Content != "Agent reply: "+text ||
		AsUint(reply.Metadata["reply_to"]) != user.Seq {
		t.Fatalf("send %s: reply %+v", id, reply)
	}
	return user.Seq
}

func snapshot(t *testing.T, r *Registry, sid, user string) Snapshot {
	t.Helper()
	s, err := r.Snapshot(sid, user)
	if err != nil {
		t.Fatalf("Snapshot(%q): %v", sid, err)
	}
	return s
}

func waitStatus(t *testing.T, r *Registry, sid, user string, st wal.Status) Snapshot {
	t.Helper()
	var s Snapshot
	eventually(t, fmt.Sprintf("%s is %s", sid, st), func() bool {
		s = snapshot(t, r, sid, user)
		return s.Meta.Status == st
	})
	return s
}

// waitEntry polls the log until an entry matching pred exists.
func waitEntry(t *testing.T, r *Registry, sid, user, what string, pred func(wal.Entry) bool) Snapshot {
	t.Helper()
	var s Snapshot
	eventually(t, what, func() bool {
		s = snapshot(t, r, sid, user)
		return slices.ContainsFunc(s.Messages, pred)
	})
	return s
}

func isAgent(e wal.Entry) bool { return e.Role == RoleAgent }

func isTool(status string) func(wal.Entry) bool {
	return func(e wal.Entry) bool { return e.Role == RoleTool && mdString(e, "status") == status }
}
