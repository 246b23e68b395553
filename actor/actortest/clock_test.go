package actortest

import (
	"sync/atomic"
	"testing"
	"time"
)

var start = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestManualClock(t *testing.T) {
	c := NewManualClock(start)
	var order []int
	done := make(chan int, 3)
	fire := func(i int) func() { return func() { done <- i } }
	c.AfterFunc(2*time.Second, fire(2))
	c.AfterFunc(time.Second, fire(1))
	stopped := c.AfterFunc(time.Second, fire(9))
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop must report true once")
	}
	c.Advance(999 * time.Millisecond)
	select {
	case i := <-done:
		t.Fatalf("timer %d fired early", i)
	default:
	}
	c.Advance(1001 * time.Millisecond)
	for range 2 {
		order = append(order, Recv(t, "a timer", done))
	}
	if len(order) != 2 || order[0]+order[1] != 3 || !c.Now().Equal(start.Add(2*time.Second)) {
		t.Fatalf("fired %v at %v", order, c.Now())
	}
	var late atomic.Bool
	c.AfterFunc(0, func() { late.Store(true) })
	c.Advance(0)
	Eventually(t, "a timer due now fires on the next Advance", late.Load)
}
