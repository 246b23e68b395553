package cluster

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/wal"
)

// moveConcurrency bounds the sessions moved (evicted or taken over) at
// once after a membership change.
const moveConcurrency = 16

// onChange takes a new member list from the membership: the placement is
// rebuilt off the request path, then sessions whose owner changed move.
func (c *Cluster) onChange(members []Member) {
	ids := make([]string, 0, len(members))
	view := make(map[string]Member, len(members))
	for _, m := range members {
		ids = append(ids, m.ID)
		view[m.ID] = m
	}
	p := NewPlacement(ids, c.cfg.Placement)
	p.Warm(min(c.cfg.Replicas, len(ids)))
	c.mu.Lock()
	// A member this node's view had dropped that is back (a partition
	// healed, a node restarted) may have taken sessions over while it
	// could not see this node: see moveAway.
	var back []string
	for id := range view {
		if c.gone[id] {
			back = append(back, id)
			delete(c.gone, id)
		}
	}
	for id := range c.view {
		if _, ok := view[id]; !ok {
			c.gone[id] = true
		}
	}
	c.place, c.view = p, view
	attached := c.reg != nil && !c.left
	c.mu.Unlock()
	select {
	case <-c.viewed:
	default:
		close(c.viewed)
	}
	c.log.Info("members", "count", len(ids), "members", ids)
	if attached {
		c.moveAway(back)
		c.takeOver()
	}
}

// moveAway stops the actors of sessions this node no longer owns: their
// clients reconnect and reach the new owner, which takes the session over
// from the copies (this node's among them). It also stops those whose
// replicas include a member that is back: while the two could not see
// each other, that member may have owned the session and written to it,
// so this actor's memory may be stale (its next append would be fenced,
// but a resume would be served from it first). Its client reconnects and
// the session is claimed again from the newest copy.
func (c *Cluster) moveAway(back []string) {
	reg, err := c.registry()
	if err != nil {
		return
	}
	var gone []string
	for _, sid := range reg.ActiveIDs() {
		if !c.Owns(sid) || len(back) > 0 && slices.ContainsFunc(c.replicas(sid), func(id string) bool { return slices.Contains(back, id) }) {
			gone = append(gone, sid)
		}
	}
	if len(gone) == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
		defer cancel()
		c.evict(ctx, reg, gone)
	}()
}

// evict stops the given actors, a few at a time, and waits for them.
func (c *Cluster) evict(ctx context.Context, reg *actor.Registry, sids []string) {
	c.each(ctx, sids, func(sid string) {
		if err := reg.Evict(ctx, sid); err != nil {
			c.log.Warn("move session", "session", sid, "err", err)
			return
		}
		c.stats.moved.Add(1)
	})
}

// takeOver activates the sessions this node now owns that have a turn in
// flight (their owner failed while the agent worked): a disconnect is not
// a cancel, and neither is a node failure. Others wait for a client.
func (c *Cluster) takeOver() {
	reg, err := c.registry()
	if err != nil {
		return
	}
	var work []string
	_ = c.cfg.Store.ScanHeaders(c.ctx, func(h wal.Header) error {
		if h.Owner != c.cfg.Self.ID && !h.Status.Terminal() && actor.HasWork(h) && c.Owns(h.SessionID) {
			work = append(work, h.SessionID)
		}
		return nil
	}, nil)
	if len(work) == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.each(c.ctx, work, func(sid string) {
			if err := reg.Activate(c.ctx, sid); err != nil {
				c.log.Warn("take over session", "session", sid, "err", err)
			}
		})
	}()
}

// each runs fn for every sid, moveConcurrency at a time.
func (c *Cluster) each(ctx context.Context, sids []string, fn func(string)) {
	sem := make(chan struct{}, moveConcurrency)
	var wg sync.WaitGroup
	for _, sid := range sids {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(sid)
		}()
	}
	wg.Wait()
}
