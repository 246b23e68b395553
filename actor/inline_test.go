package actor

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/machine"
)

// goid is the calling goroutine's id, from its stack's header line.
func goid() uint64 {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// inlineConn records the goroutine of the first delivery, posts more
// events from inside it, and records the order the contexts they set come
// back in.
type inlineConn struct {
	mu      sync.Mutex
	first   uint64
	onFirst func()
	order   []int
	all     chan struct{}
	want    int
}

func (c *inlineConn) Deliver(o machine.Out) {
	c.mu.Lock()
	first := c.first == 0
	if first {
		c.first = goid()
	}
	if cx, ok := o.(*machine.ContextOut); ok {
		c.order = append(c.order, int(cx.Context["i"].(float64)))
		if len(c.order) == c.want {
			close(c.all)
		}
	}
	c.mu.Unlock()
	if first && c.onFirst != nil {
		c.onFirst()
	}
}

func (*inlineConn) Close(machine.CloseReason, string) {}

// TestClientGoroutineDrainsAFew: a client's event that finds nobody
// draining the mailbox is handled on the client's own goroutine (no
// hand-over per frame); events that keep coming meanwhile are handled
// too, in order, by a drain it hands over to after inlineEvents.
func TestClientGoroutineDrainsAFew(t *testing.T) {
	e := newEnv(t)
	const more = 3 * inlineEvents
	c := &inlineConn{all: make(chan struct{}), want: more}
	if _, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "s", UserID: "alice", Conn: c}); err != nil {
		t.Fatal(err)
	}
	e.settle("s")
	a := e.actorOf("s")
	c.mu.Lock()
	c.first = 0 // the session frame of the create went out already
	c.onFirst = func() {
		for i := range more {
			a.post(machine.SetContext{Conn: c, Set: map[string]any{"i": float64(i)}})
		}
	}
	c.mu.Unlock()
	if err := a.postWait(t.Context(), machine.HistoryRequest{Conn: c}); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	ran := c.first
	c.mu.Unlock()
	if ran != goid() {
		t.Fatalf("the event was handled on goroutine %d, not on the one that posted it (%d)", ran, goid())
	}
	select {
	case <-c.all:
	case <-time.After(waitTimeout):
		t.Fatalf("only %d of %d events handled", len(c.order), more)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, v := range c.order {
		if v != i {
			t.Fatalf("events handled in the order %v", c.order)
		}
	}
}
