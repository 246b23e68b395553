package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"time"
)

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// expDuration is an exponentially distributed duration of the given mean.
func expDuration(rng *rand.Rand, mean time.Duration) time.Duration {
	return time.Duration(rng.ExpFloat64() * float64(mean))
}

// chaosLoop disrupts the run's network at random moments (and, for an
// agent user, often while a tool runs) until phase ends or the client
// ends.
func (r *run) chaosLoop(phase context.Context) {
	defer close(r.chaosDone)
	u, b := r.u, r.u.b
	if b.cfg.DropEvery < 0 {
		return
	}
	for {
		var tool <-chan struct{}
		if u.agent {
			tool = r.toolStart
		}
		t := time.NewTimer(expDuration(u.chaos, b.cfg.DropEvery))
		select {
		case <-t.C:
		case <-tool:
			t.Stop()
			if u.chaos.Float64() >= 0.5 {
				continue
			}
			// Somewhere inside the tool's run.
			if !sleepCtx(phase, time.Duration(u.chaos.Float64()*0.8*float64(b.toolDelay()))) {
				return
			}
		case <-phase.Done():
			t.Stop()
			return
		case <-r.c.Done():
			t.Stop()
			return
		}
		if _, connected := r.state(); !connected {
			continue
		}
		r.disrupt(phase)
	}
}

// disrupt drops the connection (a TCP close, no close frame) or makes it
// go silent, stays away a random time — sometimes beyond the reconnect
// window, on purpose — and comes back. A silence ends with Client.Drop,
// as the client's own ping would notice it.
func (r *run) disrupt(phase context.Context) {
	u, b := r.u, r.u.b
	rng := u.chaos
	silent := rng.Float64() < b.cfg.SilentFrac
	away := time.Duration(rng.Float64() * float64(b.cfg.AwayMax))
	planned := false
	if w := b.window(); !silent && w > 0 && w <= b.cfg.Duration/3 && rng.Float64() < b.cfg.ExpireFrac {
		away = w + 500*time.Millisecond + time.Duration(rng.Float64()*float64(time.Second))
		planned = true
	}
	now := time.Now()
	kind := "drop"
	if silent {
		kind = "silence"
	}
	r.mu.Lock()
	r.induced, r.lostAt, r.byServer = kind, now, false
	r.mu.Unlock()
	if silent {
		b.rec.Count(CSilences, now, 1)
	} else {
		b.rec.Count(CDrops, now, 1)
	}
	if planned {
		b.rec.Count(CPlannedLong, now, 1)
	}
	u.net.down(silent)
	sleepCtx(phase, away)
	u.net.restore()
	if silent {
		r.c.Drop()
	}
}

// killRec is one node failure the harness caused.
type killRec struct {
	At          time.Time
	Node        string
	Signal      string
	RestartedAt time.Time
	FirstResume time.Time
}

// resumedAfter notes a session that lost its connection at lostAt, not
// by the harness's doing, and resumed at now: the first such resume
// after a kill ends that kill's kill-to-first-resume time.
func (b *Bench) resumedAfter(lostAt, now time.Time) {
	b.killMu.Lock()
	defer b.killMu.Unlock()
	for _, k := range b.kills {
		if k.FirstResume.IsZero() && !lostAt.Before(k.At) {
			k.FirstResume = now
			b.rec.Latency(HKillToResume, now, now.Sub(k.At))
		}
	}
}

// killLoop signals a random running node at every multiple of `every`
// from the start (at once if a restart ran late), and restarts it after
// cfg.Down — or, for SIGSTOP, continues it after cfg.PauseFor; one node
// is down at a time.
func (b *Bench) killLoop(ctx context.Context, every time.Duration, sig syscall.Signal, rng *rand.Rand) {
	name := map[syscall.Signal]string{syscall.SIGKILL: "KILL", syscall.SIGTERM: "TERM", syscall.SIGSTOP: "STOP"}[sig]
	kind := map[syscall.Signal]string{syscall.SIGKILL: "kill", syscall.SIGTERM: "term", syscall.SIGSTOP: "pause"}[sig]
	next := b.start
	for {
		next = next.Add(every)
		if !sleepCtx(ctx, time.Until(next)) {
			return
		}
		b.nodeMu.Lock()
		var up []int
		for i := range b.local.Len() {
			if b.local.Running(i) {
				up = append(up, i)
			}
		}
		if len(up) == 0 {
			b.nodeMu.Unlock()
			continue
		}
		i := up[rng.IntN(len(up))]
		k := &killRec{At: time.Now(), Node: b.local.Name(i), Signal: name}
		b.killMu.Lock()
		b.kills = append(b.kills, k)
		b.killMu.Unlock()
		b.rec.Mark(Marker{At: k.At.Sub(b.start), Label: name + " " + k.Node, Kind: kind})
		signal := func() error { return b.local.Signal(i, sig) }
		if sig == syscall.SIGSTOP {
			signal = func() error { return b.local.Pause(i, true) }
		}
		if err := signal(); err != nil {
			b.cfg.Logger.Error("signal node", "node", k.Node, "err", err)
		}
		if sig == syscall.SIGSTOP {
			b.cont(ctx, i, k)
		} else {
			sleepCtx(ctx, b.cfg.Down)
			b.restart(i, k)
		}
		b.nodeMu.Unlock()
	}
}

// cont lets paused node i run again after cfg.PauseFor (at once if the
// phase ends: the drain needs it).
func (b *Bench) cont(ctx context.Context, i int, k *killRec) {
	sleepCtx(ctx, b.cfg.PauseFor)
	if err := b.local.Pause(i, false); err != nil {
		b.rec.Error("node_continue", time.Now())
		b.cfg.Logger.Error("continue node", "node", k.Node, "err", err)
		return
	}
	now := time.Now()
	b.killMu.Lock()
	k.RestartedAt = now
	b.killMu.Unlock()
	b.rec.Mark(Marker{At: now.Sub(b.start), Label: "cont " + k.Node, Kind: "restart"})
}

// restart starts node i again (with a context of its own: the phase may
// be over, and the node is needed for the drain).
func (b *Bench) restart(i int, k *killRec) {
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.local.Start(sctx, i); err != nil {
		b.rec.Error("node_restart", time.Now())
		b.cfg.Logger.Error("restart node", "node", b.local.Name(i), "err", err)
		return
	}
	now := time.Now()
	b.killMu.Lock()
	k.RestartedAt = now
	b.killMu.Unlock()
	b.rec.Mark(Marker{At: now.Sub(b.start), Label: "up " + k.Node, Kind: "restart"})
}

// partitionLoop cuts a random node off from the others at every multiple
// of cfg.PartitionEvery from the start, for cfg.PartitionFor, then heals
// the lab. One time in three the cut is one way: the node's packets to
// the others are dropped, theirs still reach it. Faults come one at a
// time (nodeMu): a cut while another node is down would leave no
// majority, which tests nothing but patience.
func (b *Bench) partitionLoop(ctx context.Context, rng *rand.Rand) {
	next := b.start
	for {
		next = next.Add(b.cfg.PartitionEvery)
		if !sleepCtx(ctx, time.Until(next)) {
			return
		}
		b.nodeMu.Lock()
		b.partition(ctx, rng)
		b.nodeMu.Unlock()
	}
}

func (b *Bench) partition(ctx context.Context, rng *rand.Rand) {
	n := b.local.Len()
	i := rng.IntN(n)
	oneWay := rng.IntN(3) == 0
	k := &killRec{At: time.Now(), Node: b.local.Name(i), Signal: "CUT"}
	if oneWay {
		k.Signal = "CUT1W"
	}
	b.killMu.Lock()
	b.kills = append(b.kills, k)
	b.killMu.Unlock()
	b.rec.Mark(Marker{At: k.At.Sub(b.start), Label: k.Signal + " " + k.Node, Kind: "partition"})
	// The lab's own commands must run to the end even when the phase
	// does: a cut left in place would outlive the run.
	lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if oneWay {
		for j := range n {
			if j != i {
				err = errors.Join(err, b.lab.CutOneWay(lctx, i, j))
			}
		}
	} else {
		err = b.lab.Isolate(lctx, i)
	}
	if err != nil {
		b.rec.Error("node_partition", time.Now())
		b.cfg.Logger.Error("partition node", "node", k.Node, "err", err)
	}
	sleepCtx(ctx, b.cfg.PartitionFor)
	if err := b.lab.Heal(lctx); err != nil {
		b.rec.Error("node_heal", time.Now())
		b.cfg.Logger.Error("heal the partition", "node", k.Node, "err", err)
		return
	}
	now := time.Now()
	b.killMu.Lock()
	k.RestartedAt = now
	b.killMu.Unlock()
	b.rec.Mark(Marker{At: now.Sub(b.start), Label: "heal " + k.Node, Kind: "restart"})
}

// newRand is a generator for one purpose (stream) of a seeded run.
func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }
