package cluster

import (
	"context"
	"errors"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/wal"
)

// Background re-replication: R copies must hold over time, not only at
// write. After a configuration change, a session nobody touches would
// keep its copies on the old write set, and losing those nodes later
// would lose it. So once a node has caught up with a new configuration,
// it walks the copies it holds and, for each session whose write set
// changed since it was last claimed, has the session's owner claim it
// again (fence, read, pull, catch up the new replicas) — the same path
// as a takeover, so no new rule of safety. Rate limited by
// Config.RereplicateRate; counted in Stats.Rereplicated, and
// Stats.RereplicatedConfiguration says which configuration's pass has
// finished (every copy this node holds is on its write set again).

// rereplicate runs one pass for cfg; a newer configuration cancels ctx.
func (c *Cluster) rereplicate(ctx context.Context, cfg Configuration) {
	self := c.cfg.Self.ID
	lim := rate.NewLimiter(rate.Limit(c.cfg.RereplicateRate), max(1, int(c.cfg.RereplicateRate/10)))
	var sids []string
	err := c.cfg.Store.ScanHeaders(ctx, func(h wal.Header) error {
		if !h.Status.Terminal() && c.writeSetChanged(h, cfg) {
			sids = append(sids, h.SessionID)
		}
		return nil
	}, nil)
	if err != nil && ctx.Err() == nil {
		c.log.Warn("re-replication: scan the copies", "err", err)
	}
	place := c.cons.fsm.placement(cfg)
	c.stats.rereplicating.Store(int64(len(sids)))
	for round := 0; len(sids) > 0; round++ {
		var failed []string
		for _, sid := range sids {
			if err := lim.Wait(ctx); err != nil {
				return
			}
			owner := place.Owner(sid)
			var err error
			if owner == self {
				err = c.journal.rereplicate(ctx, sid)
			} else {
				err = c.call(ctx, owner, methodAdopt, headReq{SID: sid}, nil)
			}
			if err != nil {
				failed = append(failed, sid)
				c.log.Debug("re-replicate", "session", sid, "owner", owner, "err", err)
				continue
			}
			c.stats.rereplicating.Add(-1)
		}
		sids = failed
		if len(sids) > 0 {
			// Retried while this configuration lasts: its owner may
			// still be catching up, or a node is coming back.
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(time.Duration(round+1)*time.Second, 10*time.Second)):
			}
		}
	}
	c.stats.rereplicatedCfg.Store(cfg.Number)
	c.log.Info("re-replication done", "configuration", cfg.Number)
}

// writeSetChanged reports whether sid's copies may not be where a claim
// under cfg would look: its write set under some configuration since the
// copy was last written or settled differs from the one under cfg (a
// claim must then reach a holder of each of those older sets).
func (c *Cluster) writeSetChanged(h wal.Header, cfg Configuration) bool {
	k := max(epochConfig(h.LastEpoch), h.Settled)
	if k == cfg.Number {
		return false
	}
	now := c.cons.fsm.placement(cfg).Replicas(h.SessionID, cfg.Replicas)
	slices.Sort(now)
	for _, then := range c.cons.fsm.since(k) {
		old := c.cons.fsm.placement(then).Replicas(h.SessionID, then.Replicas)
		slices.Sort(old)
		if !slices.Equal(old, now) {
			return true
		}
	}
	return false
}

// rereplicate brings sid's copies onto its current write set, at its
// owner (this node): an active session's replicator catches the new
// replicas up at once; an idle one is claimed and released again.
func (j *journal) rereplicate(ctx context.Context, sid string) error {
	j.mu.Lock()
	r := j.repls[sid]
	j.mu.Unlock()
	if r != nil {
		err := r.resync(ctx)
		if err == nil {
			j.c.stats.rereplicated.Add(1)
		}
		return err
	}
	cfg := j.c.cons.fsm.current()
	if h, err := j.local.Header(sid); err == nil && (h.Status.Terminal() || h.Settled == cfg.Number) {
		return nil // settled under this configuration already
	}
	// An idle session is activated through the registry, so this claim
	// and a client's arriving at the same time are one claim, not two
	// that would stop each other's replicator; the actor passivates
	// after its idle timeout as any other.
	reg, err := j.c.registry()
	if err != nil {
		return err
	}
	if err := reg.Activate(ctx, sid); err != nil {
		if errors.Is(err, actor.ErrNotFound) || errors.Is(err, wal.ErrNotFound) {
			return nil
		}
		return err
	}
	j.mu.Lock()
	r = j.repls[sid]
	j.mu.Unlock()
	if r == nil {
		return nil // ended (or passivated) already: its claim caught the replicas up
	}
	// Every replica, this time: the pass is done only once all hold it.
	if err := r.resync(ctx); err != nil {
		return err
	}
	j.c.stats.rereplicated.Add(1)
	return nil
}

// resync has the replicator catch every replica of the current write set
// up again, in its own goroutine and in order with the session's appends
// (an empty shipment after them; each replica is caught up before it
// takes it), and waits for it.
func (r *replicator) resync(ctx context.Context) error {
	h, err := r.j.local.Header(r.sid)
	if err != nil {
		return err
	}
	r.mu.Lock()
	clear(r.synced)
	r.mu.Unlock()
	done := make(chan error, 1)
	r.enqueue(&wal.Batch{SessionID: r.sid, Epoch: r.epoch, Header: h}, nil, func(err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
