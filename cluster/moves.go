package cluster

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// moveConcurrency bounds the sessions moved (evicted or taken over) at
// once after a membership change.
const moveConcurrency = 16

// onChange takes a new member list from gossip. Gossip decides nothing
// here: the list is kept for addresses, and the Raft leader is woken to
// reconcile it into the next configuration (leader.go).
func (c *Cluster) onChange(members []Member) {
	view := make(map[string]Member, len(members))
	for _, m := range members {
		view[m.ID] = m
	}
	c.mu.Lock()
	c.view = view
	c.mu.Unlock()
	if c.cons != nil {
		c.cons.poke()
	}
}

// configured takes a configuration Raft applied (from Raft's FSM
// goroutine, so it never blocks): placement follows it at once, and
// moveLoop moves sessions once the node has caught up.
func (c *Cluster) configured(cfg Configuration) {
	p := c.cons.fsm.placement(cfg)
	p.Warm(min(cfg.Replicas, len(cfg.Members)))
	c.mu.Lock()
	c.config, c.place = cfg, p
	c.mu.Unlock()
	select {
	case c.configs <- struct{}{}:
	default:
	}
}

// moveLoop acts on new configurations: once this node has caught up with
// one (never on a configuration it is still replaying), it stops the
// actors of sessions it no longer owns and takes over those it now owns
// that have a turn in flight.
func (c *Cluster) moveLoop() {
	var done uint64
	pass := newPasses(c.ctx)
	defer pass.stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.configs:
		}
		cfg, err := c.cons.waitCommitted(c.ctx)
		if err != nil || cfg.Number == done {
			continue
		}
		done = cfg.Number
		c.log.Info("configuration", "number", cfg.Number, "members", cfg.IDs())
		c.mu.RLock()
		attached := c.reg != nil && !c.left
		c.mu.RUnlock()
		if attached {
			c.moveAway()
			c.takeOver()
			ctx := pass.next()
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.rereplicate(ctx, cfg)
			}()
		}
	}
}

// ownedThroughout reports whether this node owned sid under every
// configuration since the one its actor claimed it under: if another node
// owned it in between (this node was cut off, then came back), that node
// may have written to it, and this actor's memory is stale even though
// its appends would be fenced.
func (c *Cluster) ownedThroughout(sid string) bool {
	epoch := c.journal.claimedUnder(sid)
	return epoch == 0 || c.ownedSince(sid, epoch, math.MaxUint64)
}

// claimProven reports whether the claim epoch this node's actor of sid
// holds (0: none, as when the actor is stepping down and has let its
// claim go) is one no configuration since gave to another owner: only
// then is the actor's memory the whole session, and a resume it refuses
// refused for good.
func (c *Cluster) claimProven(sid string, epoch uint64) bool {
	return epoch != 0 && c.ownedSince(sid, epoch, math.MaxUint64)
}

// ownedSince reports whether this node owned sid under every
// configuration from the one epoch was claimed under up to number upTo.
func (c *Cluster) ownedSince(sid string, epoch, upTo uint64) bool {
	_, other := c.otherOwner(sid, c.cfg.Self.ID, epochConfig(epoch), upTo)
	return other == ""
}

// overtaken names a configuration this node holds, since the one epoch
// was taken under, that gives sid to another owner than the claimant
// (and that owner); "" when there is none. A fence from such a claim is
// refused: the claimant read an old configuration (a node woken from a
// pause can, for a moment), and its cover would walk only the
// configurations it knows, missing what the owner in between wrote.
func (c *Cluster) overtaken(sid string, epoch uint64, claimant string) (uint64, string) {
	return c.otherOwner(sid, claimant, epochConfig(epoch), math.MaxUint64)
}

// otherOwner returns the first configuration from the one in force at
// from up to number upTo whose placement gives sid to another node than
// who, and that node ("" when every one gives it to who).
func (c *Cluster) otherOwner(sid, who string, from, upTo uint64) (uint64, string) {
	for _, cfg := range c.cons.fsm.since(from) {
		if cfg.Number > upTo {
			break
		}
		if owner := c.cons.fsm.placement(cfg).Owner(sid); owner != who {
			return cfg.Number, owner
		}
	}
	return 0, ""
}

// moveAway stops the actors of sessions this node no longer owns: their
// clients reconnect and reach the new owner, which fences the copies and
// takes the session over from the newest.
func (c *Cluster) moveAway() {
	reg, err := c.registry()
	if err != nil {
		return
	}
	// By the configuration alone: Owns also asks whether this node is
	// caught up right now, which a slow moment can briefly deny, and an
	// actor stopped for that would leave its turn waiting for a client.
	self := c.cfg.Self.ID
	c.mu.RLock()
	place := c.place
	c.mu.RUnlock()
	var gone []string
	for _, sid := range reg.ActiveIDs() {
		if place.Owner(sid) != self || !c.ownedThroughout(sid) {
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
		if h.Owner != c.cfg.Self.ID && !h.Status.Terminal() && machine.HasWork(h) && c.Owns(h.SessionID) {
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

// passes hands out one context at a time: the next ends the one before
// (a re-replication pass for an older configuration is moot).
type passes struct {
	parent context.Context
	cancel context.CancelFunc
}

func newPasses(parent context.Context) *passes { return &passes{parent: parent} }

func (p *passes) next() context.Context {
	p.stop()
	ctx, cancel := context.WithCancel(p.parent)
	p.cancel = cancel
	return ctx
}

func (p *passes) stop() {
	if p.cancel != nil {
		p.cancel()
	}
}
