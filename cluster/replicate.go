package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tether-dev/tether/wal"
)

// replicator ships one owned session's appends to its replicas, in order,
// after each is durable here. Batches that queue up while a shipment is in
// flight go out together in the next one, so replication costs a round
// trip per burst, not per append. A replica that is behind (new in the
// set, restarted, diverged) is caught up from this node's log before it
// counts; one that refuses with a newer epoch ends this node's ownership.
type replicator struct {
	j     *journal
	c     *Cluster
	sid   string
	epoch uint64

	mu      sync.Mutex
	queue   []queued
	running bool
	stopped bool

	// Owned by the shipping goroutine (or the claim, before it starts):
	// every replica in synced holds the log up to shipped.
	shipped, shippedEpoch uint64
	synced                map[string]bool
	failed                error  // sticky: every later append fails with it
	settle                uint64 // the configuration the current targets are of
}

type queued struct {
	b    wal.Batch
	err  error // the local append's
	done func(error)
}

// errReplicatorStopped: the session was released while a shipment waited.
var errReplicatorStopped = errors.New("cluster: session released")

// errMovedOn: a configuration since this node's claim gives the session
// to another node. It wraps wal.ErrStaleEpoch, as a fence by the new
// owner would: the actor steps down and sends its clients to reconnect
// (1012), the same as when the configuration moves the session away.
var errMovedOn = fmt.Errorf("cluster: the session moved on since this node's claim: %w", wal.ErrStaleEpoch)

func newReplicator(j *journal, sid string, epoch, shipped, shippedEpoch uint64) *replicator {
	return &replicator{j: j, c: j.c, sid: sid, epoch: epoch, shipped: shipped, shippedEpoch: shippedEpoch}
}

// enqueue takes a batch whose local append finished (err says how). It
// runs on the store's committer goroutine, so it never blocks.
func (r *replicator) enqueue(b *wal.Batch, err error, done func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		done(errReplicatorStopped)
		return
	}
	if len(r.queue) == 0 && !r.running && err == nil && r.failed == nil && len(r.targets()) == 0 {
		// Nothing to replicate to (a cluster of one): durable here is
		// durable. Entries still count as shipped for later catch-ups.
		if n := len(b.Entries); n > 0 {
			r.shipped, r.shippedEpoch = b.Entries[n-1].Seq, r.epoch
		}
		done(nil)
		return
	}
	r.queue = append(r.queue, queued{b: *b, err: err, done: done})
	if !r.running {
		r.running = true
		r.c.wg.Add(1)
		go r.run()
	}
}

func (r *replicator) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
}

func (r *replicator) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

func (r *replicator) run() {
	defer r.c.wg.Done()
	for {
		r.mu.Lock()
		items := r.queue
		r.queue = nil
		if len(items) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		r.ship(items)
	}
}

// ship replicates the items that were appended here and answers each, in
// order. From the first local failure on, everything fails (fail-stop).
func (r *replicator) ship(items []queued) {
	ok := items
	if i := slices.IndexFunc(items, func(q queued) bool { return q.err != nil }); i >= 0 {
		ok = items[:i]
		if r.failed == nil {
			r.failed = items[i].err
		}
	}
	var err error
	if r.failed != nil && len(ok) == len(items) {
		err = r.failed
	} else if len(ok) > 0 {
		err = r.replicate(r.merge(ok))
		if err != nil {
			r.failed = err
		}
	}
	for i, q := range items {
		switch {
		case i < len(ok) && err == nil:
			q.done(nil)
		case i < len(ok):
			q.done(err)
		default:
			q.done(r.failed)
		}
	}
}

// merge makes one copy of consecutive batches.
func (r *replicator) merge(items []queued) wal.Copy {
	c := wal.Copy{SessionID: r.sid, Epoch: r.epoch, Owner: r.c.cfg.Self.ID, Prev: r.shipped, PrevEpoch: r.shippedEpoch}
	for _, q := range items {
		for _, e := range q.b.Entries {
			e.Epoch = r.epoch
			c.Entries = append(c.Entries, e)
		}
		c.Sends = append(c.Sends, q.b.Sends...)
		c.Header = q.b.Header
		if q.b.Context != nil {
			c.Context = q.b.Context
		}
	}
	return c
}

// replicate stores cp on every replica, catching up those that are
// behind, and retries while a replica does not answer — the leader will
// either see it back or commit a configuration without it — for at most
// ForwardFor: then the entries were never acknowledged, and the session
// fails over to a new claim (its clients are told unavailable and retry).
func (r *replicator) replicate(cp wal.Copy) error {
	backoff := 20 * time.Millisecond
	deadline := time.Now().Add(r.c.cfg.ForwardFor)
	for {
		number, targets, err := r.shipUnder()
		if err != nil {
			r.c.stats.unavailable.Add(1)
			return err
		}
		r.settle = number
		err = r.shipTo(targets, cp)
		if err == nil {
			if n := len(cp.Entries); n > 0 {
				r.shipped, r.shippedEpoch = cp.Entries[n-1].Seq, cp.Entries[n-1].Epoch
			}
			r.c.stats.replicated.Add(1)
			return nil
		}
		if errors.Is(err, wal.ErrStaleEpoch) {
			r.c.stats.fenced.Add(1)
			return err
		}
		if r.isStopped() {
			return errReplicatorStopped
		}
		if r.c.hasLeft() {
			// Gossip is shut down: the view that would drop a dead
			// replica never comes, and retrying would hold the leave up
			// forever. The entries were never acknowledged.
			return fmt.Errorf("%w: cannot replicate after leaving: %v", ErrUnavailable, err)
		}
		if time.Now().After(deadline) {
			r.c.stats.unavailable.Add(1)
			return fmt.Errorf("%w: replicas of %s did not store its entries within %v: %v", ErrUnavailable, r.sid, r.c.cfg.ForwardFor, err)
		}
		r.c.log.Warn("replication delayed", "session", r.sid, "err", err)
		select {
		case <-r.c.ctx.Done():
			return fmt.Errorf("%w: %v", ErrClosed, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// targets are the session's replicas but this node.
func (r *replicator) targets() []string {
	return slices.DeleteFunc(r.c.replicas(r.sid), func(id string) bool { return id == r.c.cfg.Self.ID })
}

// shipUnder is the configuration a shipment goes out under: the newest
// applied one's number and the session's replicas in it but this node.
// It is an error when this node has not owned the session in every
// configuration since its claim up to that one: another owner may have
// acknowledged entries in between that this node never saw, so nothing
// it ships may be acknowledged, nor mark a copy complete as of that
// configuration (wal.Header.Settled) — a later claim would trust such a
// copy and skip the write sets that hold those entries.
func (r *replicator) shipUnder() (uint64, []string, error) {
	r.c.mu.RLock()
	number := r.c.config.Number
	replicas := r.c.place.Replicas(r.sid, r.c.config.Replicas)
	r.c.mu.RUnlock()
	if !r.c.ownedSince(r.sid, r.epoch, number) {
		return 0, nil, fmt.Errorf("%w: %s had another owner after this node's claim (configuration %d), up to configuration %d", errMovedOn, r.sid, epochConfig(r.epoch), number)
	}
	return number, slices.DeleteFunc(replicas, func(id string) bool { return id == r.c.cfg.Self.ID }), nil
}

// shipTo stores cp on every target in parallel; the first error (a fence
// above all) is returned.
func (r *replicator) shipTo(targets []string, cp wal.Copy) error {
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.shipOne(t, cp)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			r.c.reportUnreachable(targets[i], err)
		}
	}
	for _, err := range errs {
		if errors.Is(err, wal.ErrStaleEpoch) {
			return err
		}
	}
	return errors.Join(errs...)
}

func (r *replicator) shipOne(t string, cp wal.Copy) error {
	if !r.isSynced(t) {
		if err := r.catchUp(t, r.settle); err != nil {
			return err
		}
	}
	err := remoteErr(r.c.call(r.c.ctx, t, methodCopy, cp, nil))
	if errors.Is(err, wal.ErrSeqGap) || errors.Is(err, wal.ErrDiverged) {
		r.setSynced(t, false)
	}
	return err
}

func (r *replicator) isSynced(t string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced[t]
}

func (r *replicator) setSynced(t string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.synced == nil {
		r.synced = make(map[string]bool, 2)
	}
	r.synced[t] = ok
}

// fenceAll catches every replica up to what this node holds (and so
// fences it with this node's epoch). Every replica must take it before
// the session is served: what this node holds may include entries whose
// append failed to replicate (never acknowledged, never shown), and a
// replay or a duplicate send's ack would otherwise show them while they
// are on this node alone.
func (r *replicator) fenceAll(ctx context.Context) error {
	settle, targets, err := r.shipUnder()
	if err != nil {
		// A claim or a creation that the configuration overtook:
		// retried by the client, at the owner the newest one names.
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.catchUp(t, settle)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		if errors.Is(err, wal.ErrStaleEpoch) {
			return err
		}
		r.c.reportUnreachable(targets[i], err)
		return fmt.Errorf("%w: replica %s of %s not caught up: %v", ErrUnavailable, targets[i], r.sid, err)
	}
	return ctx.Err()
}

// remoteErr maps the link codes of a copy's refusal to wal's sentinels.
func remoteErr(err error) error {
	switch ErrorCode(err) {
	case codeStaleEpoch:
		return fmt.Errorf("%w: %v", wal.ErrStaleEpoch, err)
	case codeSeqGap:
		return fmt.Errorf("%w: %v", wal.ErrSeqGap, err)
	case codeDiverged:
		return fmt.Errorf("%w: %v", wal.ErrDiverged, err)
	case codeNotFound:
		return fmt.Errorf("%w: %v", wal.ErrNotFound, err)
	}
	return err
}
