package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tether-dev/tether/wal"
)

// copyAt is one node's copy of a session, as a fence or a peek found it.
type copyAt struct {
	node   string
	header wal.Header
}

// newer reports whether copy a holds everything b holds and maybe more:
// the copy whose last entry has the newer epoch, then the longer one, has
// every entry that was ever acknowledged (an owner acknowledges only what
// all its replicas stored, and every new owner starts from such a copy).
func (a copyAt) newer(b copyAt) bool {
	if a.header.LastEpoch != b.header.LastEpoch {
		return a.header.LastEpoch > b.header.LastEpoch
	}
	return a.header.LastSeq > b.header.LastSeq
}

// maxFenceRounds bounds the retries of a claim whose epoch a copy had
// already passed (this node's own earlier claim under the same
// configuration that it no longer remembers).
const maxFenceRounds = 3

// claim makes this node the owner of sid under the committed
// configuration it has caught up with, in the order that loses nothing
// (Kafka's leader epochs, on an epoch Raft made unique):
//
//  1. take an epoch in the configuration's range, above this node's own;
//  2. fence the copies with it: from then on they refuse the old owner,
//     so it can acknowledge nothing more;
//  3. read their heads after the fence, and fence more nodes until every
//     configuration since the one the newest entry was written under has
//     at least one of its write set fenced (each acknowledged entry is on
//     all of its write set; a set none of whose members answers leaves
//     the session unavailable, never started from a stale copy);
//  4. pull the newest copy, claim locally, and catch up the replicas.
func (j *journal) claim(ctx context.Context, sid string) (wal.SessionData, error) {
	cfg, err := j.c.cons.fresh(ctx)
	if err != nil {
		return wal.SessionData{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	self := j.c.cfg.Self.ID
	if owner := j.c.cons.fsm.placement(cfg).Owner(sid); owner != self {
		return wal.SessionData{}, fmt.Errorf("%w: %s owns %s under configuration %d", ErrUnavailable, owner, sid, cfg.Number)
	}
	epoch := cfg.Number << epochShift
	if h, err := j.local.Header(sid); err == nil && epochConfig(h.Epoch) == cfg.Number {
		epoch = max(epoch, h.Epoch+1)
	}
	var copies []copyAt
	for round := 0; ; round++ {
		var stale uint64
		copies, stale, err = j.fenceCovering(ctx, sid, cfg, epoch)
		if err != nil {
			return wal.SessionData{}, err
		}
		if stale == 0 {
			break
		}
		if epochConfig(stale) > cfg.Number || epochConfig(stale+1) != cfg.Number || round+1 >= maxFenceRounds {
			return wal.SessionData{}, fmt.Errorf("%w: %s is fenced at epoch %d, above this node's configuration %d", ErrUnavailable, sid, stale, cfg.Number)
		}
		epoch = stale + 1
	}
	if len(copies) == 0 {
		return wal.SessionData{}, fmt.Errorf("%w: %q", wal.ErrNotFound, sid)
	}
	best := copies[0]
	for _, c := range copies[1:] {
		if c.newer(best) || (!best.newer(c) && c.node == self) {
			best = c
		}
	}
	mine := slices.IndexFunc(copies, func(c copyAt) bool { return c.node == self })
	if best.node != self && (mine < 0 || best.newer(copies[mine])) {
		if err := j.pull(ctx, sid, best, mine >= 0); err != nil {
			return wal.SessionData{}, err
		}
	}
	// The copy here is the newest one now: complete as of cfg.
	d, err := j.local.ClaimAt(ctx, sid, epoch, cfg.Number)
	if err != nil {
		if errors.Is(err, wal.ErrStaleEpoch) {
			err = fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return wal.SessionData{}, err
	}
	r := j.replicatorFor(sid, d.Header.Epoch, d.Header.LastSeq, d.Header.LastEpoch)
	if err := r.fenceAll(ctx); err != nil {
		j.drop(sid, d.Header.Epoch)
		_ = j.local.Release(context.Background(), sid, d.Header.Epoch)
		return wal.SessionData{}, err
	}
	return d, nil
}

// fenced is one node's answer to a fence.
type fenced struct {
	ok    bool // fenced (or already at this epoch)
	found bool
	hdr   wal.Header
	stale uint64 // > 0: the copy is at this newer epoch; not fenced
}

// fenceCovering fences sid at epoch on this node, the session's current
// replicas, and then as many nodes as it takes to cover every
// configuration since the newest entry's (see claim). It returns the
// copies found, or the newest epoch a copy refused the fence with.
func (j *journal) fenceCovering(ctx context.Context, sid string, cfg Configuration, epoch uint64) ([]copyAt, uint64, error) {
	first := append([]string{j.c.cfg.Self.ID}, j.c.cons.fsm.placement(cfg).Replicas(sid, cfg.Replicas)...)
	if h, err := j.local.Header(sid); err == nil && h.Owner != "" {
		first = append(first, h.Owner)
	}
	return j.cover(ctx, sid, cfg, first, func(id string) fenced { return j.fenceOne(ctx, id, sid, epoch) })
}

// cover asks first, then as many more nodes as it takes until every
// configuration since the one the newest entry found was written under,
// or the newest configuration a copy found was settled under
// (wal.Header.Settled),
// up to cfg, has a member of sid's write set that answered. Every
// acknowledged entry is on all of its write set, so then no copy newer
// than the ones found can exist; a write set none of whose members
// answers makes the session unavailable.
func (j *journal) cover(ctx context.Context, sid string, cfg Configuration, first []string, probe func(id string) fenced) ([]copyAt, uint64, error) {
	type result struct {
		id string
		a  fenced
	}
	results := make(chan result)
	done := make(chan struct{})
	defer close(done)
	answers := map[string]fenced{} // answered
	asked := map[string]bool{}
	pending := 0
	ask := func(ids []string) {
		for _, id := range ids {
			if asked[id] {
				continue
			}
			asked[id] = true
			pending++
			j.c.wg.Add(1)
			go func() {
				defer j.c.wg.Done()
				a := probe(id)
				select {
				case results <- result{id, a}:
				case <-done: // covered without this answer
				}
			}()
		}
	}
	ask(first)
	for {
		var stale, newest uint64
		for _, a := range answers {
			stale = max(stale, a.stale)
			if a.found {
				newest = max(newest, epochConfig(a.hdr.LastEpoch), a.hdr.Settled)
			}
		}
		if stale > 0 {
			return nil, stale, nil
		}
		covered := true
		for _, c := range j.c.cons.fsm.since(newest) {
			if c.Number > cfg.Number {
				break
			}
			w := j.c.cons.fsm.placement(c).Replicas(sid, c.Replicas)
			if slices.ContainsFunc(w, func(id string) bool { return answers[id].ok }) {
				continue
			}
			covered = false
			ask(w)
		}
		if covered && len(answers) > 0 || covered && pending == 0 {
			break
		}
		if pending == 0 {
			j.c.stats.unavailable.Add(1)
			return nil, 0, fmt.Errorf("%w: not every configuration's holders of %s answer (since configuration %d)", ErrUnavailable, sid, newest)
		}
		select {
		case r := <-results:
			pending--
			answers[r.id] = r.a
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	var copies []copyAt
	for id, a := range answers {
		if a.ok && a.found {
			copies = append(copies, copyAt{node: id, header: a.hdr})
		}
	}
	return copies, 0, nil
}

// fenceOne fences sid on node id (this node's own store for self).
func (j *journal) fenceOne(ctx context.Context, id, sid string, epoch uint64) fenced {
	self := j.c.cfg.Self.ID
	if id == self {
		f, err := j.local.Fence(ctx, sid, epoch, self)
		switch {
		case errors.Is(err, wal.ErrStaleEpoch):
			return fenced{stale: max(f.PrevEpoch, f.Header.Epoch)}
		case err != nil:
			j.c.log.Warn("fence local copy", "session", sid, "err", err)
			return fenced{}
		}
		return fenced{ok: true, found: f.Found, hdr: f.Header}
	}
	var resp fenceResp
	if err := j.c.call(ctx, id, methodFence, fenceReq{SID: sid, Epoch: epoch, Owner: self}, &resp); err != nil {
		j.c.log.Debug("fence", "session", sid, "node", id, "err", err)
		return fenced{}
	}
	if resp.Stale > 0 {
		return fenced{stale: resp.Stale}
	}
	return fenced{ok: true, found: resp.Found, hdr: resp.Header}
}

// peek reads the heads of sid's copies without fencing them (for a
// session this node does not hold and does not claim), covering the
// configurations as a claim does. Found false with a nil error means no
// copy can exist.
func (j *journal) peek(ctx context.Context, sid string) (copyAt, bool, error) {
	cfg := j.c.cons.fsm.current()
	best, ok, err := j.peekUnder(ctx, sid, cfg)
	if ok || err != nil {
		return best, ok, err
	}
	// No copy under the configurations this node knows. That is the
	// answer only if no newer one exists: a node whose view lags (it
	// routed a hello to itself under a configuration a newer one
	// replaced, or applied one late under load) would otherwise tell a
	// client its session does not exist, and the client would be given a
	// new one.
	fresh, err := j.c.cons.fresh(ctx)
	if err != nil {
		return copyAt{}, false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if fresh.Number == cfg.Number {
		return copyAt{}, false, nil
	}
	return j.peekUnder(ctx, sid, fresh)
}

// peekUnder surveys the copies of sid that the configurations up to cfg
// place.
func (j *journal) peekUnder(ctx context.Context, sid string, cfg Configuration) (copyAt, bool, error) {
	first := j.c.cons.fsm.placement(cfg).Replicas(sid, cfg.Replicas)
	copies, _, err := j.cover(ctx, sid, cfg, first, func(id string) fenced {
		if id == j.c.cfg.Self.ID {
			h, err := j.local.Header(sid)
			return fenced{ok: err == nil || errors.Is(err, wal.ErrNotFound), found: err == nil, hdr: h}
		}
		var resp headResp
		if err := j.c.call(ctx, id, methodHead, headReq{SID: sid}, &resp); err != nil {
			return fenced{}
		}
		return fenced{ok: true, found: resp.Found, hdr: resp.Header}
	})
	if err != nil || len(copies) == 0 {
		return copyAt{}, false, err
	}
	best := copies[0]
	for _, c := range copies[1:] {
		if c.newer(best) {
			best = c
		}
	}
	return best, true, nil
}

// pull takes from's copy of sid into this node's store: from the last
// entry both copies agree on (when this node has one) to its end; what
// this node held beyond that is truncated.
func (j *journal) pull(ctx context.Context, sid string, from copyAt, haveLocal bool) error {
	select {
	case j.c.pulls <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-j.c.pulls }()
	j.c.stats.pulls.Add(1)
	start := uint64(1)
	if haveLocal {
		var err error
		if start, err = j.agreeFrom(ctx, sid, from); err != nil {
			return err
		}
	}
	for {
		var resp readResp
		req := readReq{SID: sid, Lo: start, Hi: from.header.LastSeq + 1, Limit: catchPage, Sends: true}
		if err := j.c.call(ctx, from.node, methodRead, req, &resp); err != nil {
			return fmt.Errorf("%w: pull %s from %s: %v", ErrUnavailable, sid, from.node, err)
		}
		cp := wal.Copy{
			SessionID: sid, Epoch: resp.Data.Header.Epoch, Owner: resp.Data.Header.Owner, Adopt: true,
			Prev: start - 1, Entries: resp.Entries, Sends: resp.Sends, Header: resp.Data.Header, Context: resp.Data.Context,
		}
		if err := j.local.Store(ctx, cp); err != nil {
			return fmt.Errorf("cluster: pull %s: %w", sid, err)
		}
		n := len(resp.Entries)
		if n == 0 || resp.Entries[n-1].Seq >= from.header.LastSeq {
			return nil
		}
		start = resp.Entries[n-1].Seq + 1
	}
}

// agreeFrom finds the first seq after the last entry this node's copy and
// from's agree on (same seq, same epoch: then everything before agrees
// too), looking back from the end of the shorter copy.
func (j *journal) agreeFrom(ctx context.Context, sid string, from copyAt) (uint64, error) {
	h, err := j.local.Header(sid)
	if err != nil {
		return 1, nil //nolint:nilerr // no usable local copy: pull it all
	}
	hi := min(h.LastSeq, from.header.LastSeq)
	window := uint64(16)
	for hi > 0 {
		lo := hi - min(hi-1, window)
		var resp readResp
		if err := j.c.call(ctx, from.node, methodRead, readReq{SID: sid, Lo: lo, Hi: hi + 1, Limit: int(hi - lo + 1)}, &resp); err != nil {
			return 0, fmt.Errorf("%w: pull %s from %s: %v", ErrUnavailable, sid, from.node, err)
		}
		mine, err := j.local.Read(sid, lo, hi+1, int(hi-lo+1), false)
		if err != nil {
			return 0, err
		}
		for i := len(resp.Entries) - 1; i >= 0; i-- {
			theirs := resp.Entries[i]
			if k := int(theirs.Seq - lo); k < len(mine) && mine[k].Epoch == theirs.Epoch && mine[k].Metadata[wal.Unreadable] == nil {
				return theirs.Seq + 1, nil
			}
		}
		if lo == 1 {
			break
		}
		hi, window = lo-1, window*4
	}
	return 1, nil
}
