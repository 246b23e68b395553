package actor

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestClientGoroutineDrainsAFew: a client's event that finds nobody
// draining the mailbox is handled on the client's own goroutine (no
// hand-over per frame); events that keep coming meanwhile are handled
// too, in order, by a drain it hands over to after inlineEvents.
func TestClientGoroutineDrainsAFew(t *testing.T) {
	e := newEnv(t)
	e.create("s", "alice", newRecConn("c"))
	e.settle("s")
	a := e.actorOf("s")

	const more = 3 * inlineEvents
	var mu sync.Mutex
	var order []int
	all := make(chan struct{})
	var ranHere atomic.Bool
	first := evQuery{done: make(chan struct{}), fn: func(a *actor) {
		ranHere.Store(true)
		for i := range more {
			a.post(evQuery{done: make(chan struct{}), fn: func(*actor) {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, i)
				if len(order) == more {
					close(all)
				}
			}})
		}
	}}
	if err := a.postWait(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	if !ranHere.Load() {
		t.Fatal("the event was not handled on the goroutine that posted it")
	}
	select {
	case <-all:
	case <-time.After(waitTimeout):
		t.Fatalf("only %d of %d events handled", len(order), more)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, v := range order {
		if v != i {
			t.Fatalf("events handled in the order %v", order)
		}
	}
}
