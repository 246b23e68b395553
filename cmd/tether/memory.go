package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/tether-dev/tether/actor"
)

// memoryReturner gives back to the OS the memory that a wave of
// hibernations freed. Sessions that hibernate drop their machines, but
// the Go runtime collects that garbage only once the heap grows again to
// its goal, and returns the freed pages slowly after: a node whose
// sessions all went quiet shows, for minutes, the RSS it had while they
// talked. So once a wave is over — at least a tenth of the node's
// sessions (and at least minWave) hibernated since the last return, and
// fewer than a tenth of minWave in the last interval — it runs a
// collection and returns what is free at once (debug.FreeOSMemory). That
// costs one full GC per wave, never during one; a node whose sessions
// keep talking, or keep trickling to sleep, leaves it to the runtime.
type memoryReturner struct {
	every   time.Duration
	minWave uint64
	stats   func() actor.Stats
	free    func() // debug.FreeOSMemory; a counter in tests
	log     *slog.Logger
}

// wave reports whether the hibernations since `since` make a wave, and
// the last interval's (lately) say it is over.
func (m *memoryReturner) wave(st actor.Stats, since, lately uint64) bool {
	n := st.Hibernations - since
	return n >= m.minWave && n*10 >= uint64(st.Active+st.Asleep) && lately*10 < m.minWave
}

// run checks every interval until ctx ends.
func (m *memoryReturner) run(ctx context.Context) {
	t := time.NewTicker(m.every)
	defer t.Stop()
	since := m.stats().Hibernations
	prev := since
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := m.stats()
		lately := st.Hibernations - prev
		prev = st.Hibernations
		if !m.wave(st, since, lately) {
			continue
		}
		start := time.Now()
		m.free()
		m.log.Debug("returned freed memory to the OS", "hibernated", st.Hibernations-since, "took", time.Since(start))
		since = st.Hibernations
	}
}

// startMemoryReturner runs a memoryReturner for reg until the returned
// stop is called (every ≤ 0: none); counted is told of each return.
func startMemoryReturner(every time.Duration, reg *actor.Registry, counted func(), log *slog.Logger) (stop func()) {
	if every <= 0 || reg == nil {
		return func() {}
	}
	free := func() {
		debug.FreeOSMemory()
		counted()
	}
	m := &memoryReturner{every: every, minWave: 1000, stats: reg.Stats, free: free, log: log}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
