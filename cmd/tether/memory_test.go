package main

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
)

// The memory returner frees after a wave of hibernations is over, not
// during it, not after a trickle, and not twice for one wave.
func TestMemoryReturnerWave(t *testing.T) {
	m := &memoryReturner{minWave: 1000}
	for _, c := range []struct {
		st            actor.Stats
		since, lately uint64
		want          bool
	}{
		{actor.Stats{Hibernations: 999, Asleep: 999}, 0, 0, false},      // below the floor
		{actor.Stats{Hibernations: 1000, Asleep: 1000}, 0, 0, true},     // a wave, over
		{actor.Stats{Hibernations: 1000, Asleep: 1000}, 0, 99, true},    // nearly over
		{actor.Stats{Hibernations: 1000, Asleep: 1000}, 0, 100, false},  // still going
		{actor.Stats{Hibernations: 5000, Asleep: 5000}, 4000, 0, true},  // a tenth or more of the sessions
		{actor.Stats{Hibernations: 5000, Active: 20000}, 3000, 0, true}, // 2000 of 20000
		{actor.Stats{Hibernations: 5000, Active: 30000}, 3000, 0, false},
	} {
		if got := m.wave(c.st, c.since, c.lately); got != c.want {
			t.Errorf("wave(%+v, since %d, lately %d) = %v, want %v", c.st, c.since, c.lately, got, c.want)
		}
	}
}

func TestMemoryReturnerRun(t *testing.T) {
	var hibernated atomic.Uint64
	looked := make(chan struct{})
	freed := make(chan struct{}, 4)
	m := &memoryReturner{
		every: time.Millisecond, minWave: 1000, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		stats: func() actor.Stats {
			h := hibernated.Load()
			select {
			case looked <- struct{}{}:
			case <-time.After(10 * time.Second):
			}
			return actor.Stats{Hibernations: h, Asleep: int(h)}
		},
		free: func() { freed <- struct{}{} },
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.run(ctx)
	}()
	// looks waits for n of the loop's looks at the stats and reports how
	// many frees happened meanwhile.
	looks := func(n int) int {
		for range n {
			<-looked
		}
		return len(freed)
	}
	looks(1) // the starting point
	hibernated.Store(500)
	if looks(3) != 0 {
		t.Fatal("freed after 500 hibernations")
	}
	hibernated.Store(1500)
	if looks(1) != 0 {
		t.Fatal("freed while the wave was going")
	}
	looks(3)
	if len(freed) != 1 {
		t.Fatalf("%d frees after a wave of 1500, want 1", len(freed))
	}
	<-freed
	hibernated.Store(2400) // 900 more: not a new wave
	if looks(3) != 0 {
		t.Fatal("freed twice for one wave")
	}
	cancel()
	for {
		select {
		case <-looked:
		case <-done:
			return
		}
	}
}
