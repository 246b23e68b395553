package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tether-dev/tether/wal"
)

// copyAt is one node's copy of a session, as a survey found it.
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

// claim makes this node the owner of sid: it finds the best copy in the
// cluster, pulls what its own copy lacks, takes an epoch above every copy
// it saw, and fences and catches up the session's replicas — all before
// the session takes a write.
func (j *journal) claim(ctx context.Context, sid string) (wal.SessionData, error) {
	copies := j.survey(ctx, sid)
	best, ok := j.best(ctx, sid, copies)
	if !ok {
		return wal.SessionData{}, fmt.Errorf("%w: %q", wal.ErrNotFound, sid)
	}
	if err := j.released(ctx, sid, copies); err != nil {
		return wal.SessionData{}, err
	}
	self := j.c.cfg.Self.ID
	mine := slices.IndexFunc(copies, func(c copyAt) bool { return c.node == self })
	if mine < 0 || best.node != self && best.newer(copies[mine]) {
		if err := j.pull(ctx, sid, best, mine >= 0); err != nil {
			return wal.SessionData{}, err
		}
	}
	epoch := uint64(0)
	for _, c := range copies {
		epoch = max(epoch, c.header.Epoch)
	}
	d, err := j.local.ClaimAt(ctx, sid, epoch+1)
	if err != nil {
		return wal.SessionData{}, err
	}
	r := j.replicatorFor(sid, d.Header.Epoch, d.Header.LastSeq, d.Header.LastEpoch)
	if err := r.fenceAll(ctx, false); err != nil {
		j.drop(sid)
		_ = j.local.Release(context.Background(), sid, d.Header.Epoch)
		return wal.SessionData{}, err
	}
	return d, nil
}

// released waits until no other live member holds sid: the owner each
// copy names, when it is a member in this node's view, is asked whether
// it owns the session in its own view or still runs its actor. Views
// disagree while gossip settles (gossip is not consensus); a node that
// took a session from an owner still writing it — a stale view taking it
// back from the node that fenced it, a new owner pulling while the old
// one has not let go — could lose entries the other had acked, since it
// reads the copies before it fences them. The holder lets go as soon as
// its view catches up (moveAway), so the claim waits for that, up to
// ForwardFor; then the client is told to retry. An owner gone from the
// view (failed, left) is not asked: a takeover after a failure costs no
// call.
func (j *journal) released(ctx context.Context, sid string, copies []copyAt) error {
	self := j.c.cfg.Self.ID
	var owners []string
	for _, cp := range copies {
		if o := cp.header.Owner; o != "" && o != self && !slices.Contains(owners, o) {
			owners = append(owners, o)
		}
	}
	deadline := time.Now().Add(j.c.cfg.ForwardFor)
	for _, o := range owners {
		for {
			if _, ok := j.c.member(o); !ok {
				break
			}
			var resp holdsResp
			err := j.c.call(ctx, o, methodHolds, headReq{SID: sid}, &resp)
			if err == nil && !resp.Holds {
				break
			}
			if err == nil {
				err = fmt.Errorf("%s still holds %s", o, sid)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%w: %v", ErrUnavailable, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// survey asks the nodes that may hold a copy of sid — its replicas in
// this node's view, the owner this node's own copy names, and, when none
// of those has one, every member — for their copy's header.
func (j *journal) survey(ctx context.Context, sid string) []copyAt {
	self := j.c.cfg.Self.ID
	var found []copyAt
	asked := map[string]bool{self: true}
	if h, err := j.local.Header(sid); err == nil {
		found = append(found, copyAt{node: self, header: h})
		if h.Owner != "" && h.Owner != self {
			asked[h.Owner] = false
		}
	}
	for _, id := range j.c.replicas(sid) {
		if !asked[id] {
			asked[id] = false
		}
	}
	ask := func(ids []string) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, id := range ids {
			if _, ok := j.c.member(id); !ok {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var resp headResp
				if err := j.c.call(ctx, id, methodHead, headReq{SID: sid}, &resp); err != nil || !resp.Found {
					return
				}
				mu.Lock()
				found = append(found, copyAt{node: id, header: resp.Header})
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	var first []string
	for id, done := range asked {
		if !done {
			first = append(first, id)
			asked[id] = true
		}
	}
	ask(first)
	if len(found) == 0 {
		var rest []string
		for _, m := range j.c.others() {
			if !asked[m.ID] {
				rest = append(rest, m.ID)
			}
		}
		ask(rest)
	}
	return found
}

// best picks the copy every acknowledged entry is in (copyAt.newer),
// preferring this node's own among equals.
func (j *journal) best(_ context.Context, _ string, copies []copyAt) (copyAt, bool) {
	if len(copies) == 0 {
		return copyAt{}, false
	}
	b := copies[0]
	for _, c := range copies[1:] {
		if c.newer(b) || (!b.newer(c) && c.node == j.c.cfg.Self.ID) {
			b = c
		}
	}
	return b, true
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
