package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/wal"
)

// journal is the replicated actor.Journal: the owner writes to its own
// store and, before an append is reported durable, to every replica of the
// session; a new owner first brings its copy up to date from the best copy
// in the cluster and takes an epoch above all of them (claim.go).
type journal struct {
	c     *Cluster
	local *wal.Log

	mu    sync.Mutex
	repls map[string]*replicator // sessions claimed here
	// claiming holds the sessions with a claim or a creation under way
	// here; the channel closes when it ends. A claim's steps (fence,
	// read, pull, claim, catch up) hold only if no other claim of the
	// same session runs between them on this node: another's pull may
	// truncate what this one has just read as its log, and its
	// replicator replaces this one's.
	claiming map[string]chan struct{}
}

var _ actor.Journal = (*journal)(nil)

func newJournal(c *Cluster) *journal {
	return &journal{c: c, local: c.cfg.Store, repls: make(map[string]*replicator), claiming: make(map[string]chan struct{})}
}

// Create stores a new session here and on its replicas before it is
// shown to anyone.
func (j *journal) Create(ctx context.Context, h wal.Header, context []byte) (wal.Header, error) {
	unlock, err := j.exclusive(ctx, h.SessionID)
	if err != nil {
		return wal.Header{}, err
	}
	defer unlock()
	cfg, err := j.c.cons.fresh(ctx)
	if err != nil {
		return wal.Header{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if owner := j.c.cons.fsm.placement(cfg).Owner(h.SessionID); owner != j.c.cfg.Self.ID {
		return wal.Header{}, fmt.Errorf("%w: %s owns %s under configuration %d", ErrUnavailable, owner, h.SessionID, cfg.Number)
	}
	// No copy of a new session exists under an older configuration, so
	// a claim need not look for one there: the creator's copy is settled
	// under this one, as its replicas' copies are once fenced. Otherwise
	// a session nothing was written to yet would need, to be claimed, a
	// holder of every configuration since the cluster began — the first
	// one's only member, say, long after it died.
	h.Settled = cfg.Number
	hdr, err := j.local.CreateAt(ctx, h, context, cfg.Number<<epochShift)
	if err != nil {
		return wal.Header{}, err
	}
	r := j.replicatorFor(hdr.SessionID, hdr.Epoch, hdr.LastSeq, 0)
	if err := r.fenceAll(ctx); err != nil {
		j.drop(hdr.SessionID, hdr.Epoch)
		_ = j.local.Release(ctx, hdr.SessionID, hdr.Epoch)
		_, _ = j.local.DeleteSession(ctx, hdr.SessionID, nil)
		return wal.Header{}, fmt.Errorf("%w: store the new session on its replicas: %v", ErrUnavailable, err)
	}
	return hdr, nil
}

// Claim makes this node the session's owner (claim.go).
// Claims of one session on this node run one at a time (exclusive).
func (j *journal) Claim(ctx context.Context, sid string) (wal.SessionData, error) {
	unlock, err := j.exclusive(ctx, sid)
	if err != nil {
		return wal.SessionData{}, err
	}
	defer unlock()
	return j.claim(ctx, sid)
}

// exclusive waits until no other claim or creation of sid runs here and
// marks one as running until unlock is called.
func (j *journal) exclusive(ctx context.Context, sid string) (unlock func(), err error) {
	for {
		j.mu.Lock()
		busy, ok := j.claiming[sid]
		if !ok {
			mine := make(chan struct{})
			j.claiming[sid] = mine
			j.mu.Unlock()
			return func() {
				j.mu.Lock()
				delete(j.claiming, sid)
				j.mu.Unlock()
				close(mine)
			}, nil
		}
		j.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Release gives up the claim made with epoch. A newer claim of the
// session here keeps its replicator: the actor of an older one may end
// after the next one has started.
func (j *journal) Release(ctx context.Context, sid string, epoch uint64) error {
	j.drop(sid, epoch)
	return j.local.Release(ctx, sid, epoch)
}

// AppendAsync appends locally and, once that is durable, on every
// replica; done hears of it when both are (in order, per session).
func (j *journal) AppendAsync(ctx context.Context, b *wal.Batch, done func(error)) error {
	j.mu.Lock()
	r := j.repls[b.SessionID]
	j.mu.Unlock()
	if r == nil {
		return fmt.Errorf("%w: %q is not claimed by this node", wal.ErrNotClaimed, b.SessionID)
	}
	return j.local.AppendAsync(ctx, b, func(err error) { r.enqueue(b, err, done) })
}

// Header reads the local copy, or, when this node has none (an owner that
// has not pulled the session yet), the best copy in the cluster.
func (j *journal) Header(sid string) (wal.Header, error) {
	h, err := j.local.Header(sid)
	if !errors.Is(err, wal.ErrNotFound) {
		return h, err
	}
	best, ok, perr := j.peek(j.c.ctx, sid)
	if perr != nil {
		return wal.Header{}, perr
	}
	if !ok {
		return wal.Header{}, err
	}
	return best.header, nil
}

// Load is Header with the context.
func (j *journal) Load(sid string) (wal.SessionData, error) {
	d, err := j.local.Load(sid)
	if !errors.Is(err, wal.ErrNotFound) {
		return d, err
	}
	best, ok, perr := j.peek(j.c.ctx, sid)
	if perr != nil {
		return wal.SessionData{}, perr
	}
	if !ok {
		return wal.SessionData{}, err
	}
	var resp readResp
	if err := j.c.call(j.c.ctx, best.node, methodRead, readReq{SID: sid}, &resp); err != nil {
		return wal.SessionData{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return resp.Data, nil
}

// The owner has the whole log once it claimed the session: reads are
// local.

func (j *journal) Read(sid string, lo, hi uint64, limit int, newest bool) ([]wal.Entry, error) {
	return j.local.Read(sid, lo, hi, limit, newest)
}

func (j *journal) ReadRaw(sid string, lo, hi uint64, limit int, newest bool) ([]wal.RawEntry, error) {
	return j.local.ReadRaw(sid, lo, hi, limit, newest)
}

func (j *journal) SendSeq(sid, id string) (uint64, bool, error) { return j.local.SendSeq(sid, id) }

func (j *journal) ScanSends(sid string, fn func(id string, seq uint64)) error {
	return j.local.ScanSends(sid, fn)
}

// replicatorFor starts replicating sid under epoch.
func (j *journal) replicatorFor(sid string, epoch, lastSeq, lastEpoch uint64) *replicator {
	r := newReplicator(j, sid, epoch, lastSeq, lastEpoch)
	j.mu.Lock()
	if old := j.repls[sid]; old != nil {
		old.stop()
	}
	j.repls[sid] = r
	j.mu.Unlock()
	return r
}

// claimedUnder is the epoch sid was claimed with here (0: not claimed).
func (j *journal) claimedUnder(sid string) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r := j.repls[sid]; r != nil {
		return r.epoch
	}
	return 0
}

// drop stops sid's replicator if it is the one of the claim with epoch.
func (j *journal) drop(sid string, epoch uint64) {
	j.mu.Lock()
	r := j.repls[sid]
	if r == nil || r.epoch != epoch {
		j.mu.Unlock()
		return
	}
	delete(j.repls, sid)
	j.mu.Unlock()
	r.stop()
}
