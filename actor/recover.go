package actor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// live reports whether a session counts against its user's limit.
func live(h wal.Header, now time.Time) bool {
	return !h.Status.Terminal() && !(h.Status == wal.StatusInterrupted && !now.Before(h.ExpiresAt))
}

// errIdle is how a boot-pass placeholder ends when its session, once
// recovered, had no work in flight: get does not treat it as a failure
// but activates the session afresh.
var errIdle = errors.New("actor: session recovered without work in flight")

// startRecovery starts the boot pass: at once if there is nothing to
// recover, else in the background (recoverPending).
func (r *Registry) startRecovery() error {
	if r.cfg.Store == nil {
		r.pending = nil
		close(r.recovered)
		return nil
	}
	ids, err := r.scanRecovery()
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		r.pending = nil
		if err := r.finishRecovery(r.ctx); err != nil {
			return fmt.Errorf("actor: record liveness: %w", err)
		}
		return nil
	}
	// Close cancels the pass first: a recovery waiting on peers must not
	// hold the shutdown up.
	ctx, stop := context.WithCancel(r.ctx)
	r.stopRecovery = stop
	r.wg.Add(1)
	go r.recoverPending(ctx, ids)
	return nil
}

// scanRecovery lists the sessions a previous run left live on this node,
// counting them against their users' limits at once, for recoverPending
// to bring up to date.
func (r *Registry) scanRecovery() ([]string, error) {
	r.boot = r.clock.Now()
	lastAlive, ok, err := r.cfg.Store.LastAlive()
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	r.lastAlive = r.boot
	if ok {
		r.lastAlive = lastAlive
	}
	var ids []string
	err = r.cfg.Store.ScanHeaders(r.ctx, func(h wal.Header) error {
		if !h.Status.Terminal() && r.cfg.Owns(h.SessionID) {
			ids = append(ids, h.SessionID)
			r.pending[h.SessionID] = true
			r.live[h.UserID]++
		}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("recover: scan: %w", err)
	}
	return ids, nil
}

// recoverPending is the boot pass, run in the background so that a node
// serves (among other things the links its peers' recoveries need: after
// a whole-cluster restart every node waits on the others) while it
// recovers. Each session is recovered under a placeholder actor, so a
// client arriving meanwhile waits for it; one a client reaches first is
// recovered by that client's get. Once every session is done the node
// records that it is alive and starts its liveness and sweep jobs — not
// before: a liveness mark written ahead of a session's recovery would
// make the next boot expire a window this run never extended.
func (r *Registry) recoverPending(ctx context.Context, ids []string) {
	defer r.wg.Done()
	work := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Int64
	// Workers share the log's group commit, so recovery of many sessions
	// costs far fewer fsyncs than sessions.
	for range r.cfg.MaxActivations {
		wg.Go(func() {
			for sid := range work {
				if err := r.recoverBoot(ctx, sid); err != nil && !errors.Is(err, errIdle) && ctx.Err() == nil {
					failed.Add(1)
					r.log.Error("recover session; it will be loaded as it is when next used", "session", sid, "err", err)
				}
			}
		})
	}
feed:
	for _, sid := range ids {
		select {
		case work <- sid:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	// Recoveries that clients started are part of the pass too.
	r.mu.Lock()
	r.pending = nil
	r.mu.Unlock()
	r.inflight.Wait()
	if ctx.Err() != nil {
		return
	}
	r.log.Info("recovered sessions", "count", len(ids), "failed", failed.Load(), "last_alive", r.lastAlive)
	if err := r.finishRecovery(ctx); err != nil && ctx.Err() == nil {
		r.log.Error("record liveness", "err", err)
	}
}

// finishRecovery ends the boot pass: the node records that it is alive,
// starts the liveness and sweep jobs, and then says it has recovered (so
// that whoever waits on Recovered finds the jobs scheduled).
func (r *Registry) finishRecovery(ctx context.Context) error {
	err := r.markAlive(ctx)
	r.every("liveness", r.cfg.AliveInterval, r.markAlive)
	if r.cfg.SweepInterval > 0 {
		r.every("retention sweep", r.cfg.SweepInterval, r.sweep)
	}
	close(r.recovered)
	return err
}

// recoverBoot recovers sid under a placeholder actor unless a client got
// to it first, and starts it if it has work in flight: a disconnect is not
// a cancel, and neither is a restart.
func (r *Registry) recoverBoot(ctx context.Context, sid string) error {
	r.mu.Lock()
	if r.closed || !r.pending[sid] {
		r.mu.Unlock()
		return nil
	}
	delete(r.pending, sid)
	a := newActor(r, sid)
	r.actors[sid] = a
	r.mu.Unlock()
	return r.start(ctx, a, r.bootRecover(), true)
}

// bootRecover is the Recover of a session the previous run left.
func (r *Registry) bootRecover() *machine.Recover {
	return &machine.Recover{Boot: r.boot, LastAlive: r.lastAlive}
}

// recoverOne brings sid up to date in the log (rec) and reports whether
// the session has work in flight. Copies held for other owners stay
// passive.
func (r *Registry) recoverOne(ctx context.Context, sid string, rec machine.Recover) (bool, error) {
	d, err := r.cfg.Journal.Claim(ctx, sid)
	if err != nil {
		return false, fmt.Errorf("recover %s: %w", sid, err)
	}
	s, dmg := machine.New(r.sessionConfig(), machine.Restore{Data: d}, r.boot)
	r.damaged(sid, dmg)
	err = r.stepSync(ctx, s, d.Header.Epoch, rec)
	if rerr := r.cfg.Journal.Release(ctx, sid, d.Header.Epoch); err == nil {
		err = rerr
	}
	if err != nil {
		return false, fmt.Errorf("recover %s: %w", sid, err)
	}
	return s.HasWork(), nil
}

// stepSync steps a machine no actor runs (a session brought up to date
// in passing, at boot or after its actor failed) with ev, appending what
// it asks for and waiting for each append.
func (r *Registry) stepSync(ctx context.Context, s *machine.Machine, epoch uint64, ev machine.Event) error {
	effs := s.Step(r.clock.Now(), ev)
	for i := 0; i < len(effs); i++ {
		switch e := effs[i].(type) {
		case machine.Append:
			e.Batch.Epoch = epoch
			err := appendSync(ctx, r.cfg.Journal, e.Batch)
			// What waited for the append (an expiry's Ended) is released
			// only now.
			effs = append(effs, s.Step(r.clock.Now(), machine.Appended{ID: e.ID, Err: err})...)
			if err != nil {
				return err
			}
		case machine.Ended:
			r.ended(e.UserID)
		}
	}
	return nil
}

// sweep deletes the sessions whose retention has passed and recounts each
// user's live sessions (the count drifts: sessions expire in the log
// without an actor to tell).
func (r *Registry) sweep(ctx context.Context) error {
	now := r.clock.Now()
	n, err := r.cfg.Store.Sweep(ctx, now, r.cfg.Retention)
	if n > 0 {
		r.log.Info("retention sweep", "deleted", n)
	}
	if err != nil {
		return err
	}
	counts := make(map[string]int)
	err = r.cfg.Store.ScanHeaders(ctx, func(h wal.Header) error {
		if live(h, now) && r.cfg.Owns(h.SessionID) {
			counts[h.UserID]++
		}
		return nil
	}, nil)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.live = counts
	r.mu.Unlock()
	return nil
}
