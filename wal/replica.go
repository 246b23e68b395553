package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Copy is what a session's owner ships to a node that keeps a copy of
// its log (a replica): entries (each stamped with the epoch it was written
// under), their send ids, and the header and context as the owner has
// them.
//
// The fence: a copy records the owner epoch and the owner node of the
// last copy it took. It refuses one with an older epoch, and one with the
// same epoch from another node: an epoch belongs to one owner, so two
// nodes that both believe they own a session cannot both write.
//
// The consistency check is raft's: Prev and PrevEpoch name the entry just
// before the shipped ones, and a copy that does not hold that entry under
// that epoch refuses (ErrDiverged), so the owner ships from further back.
// Where shipped entries overlap held ones of another epoch — entries a
// stale owner stored that no replica acknowledged and no client saw — the
// held ones are truncated.
type Copy struct {
	SessionID string
	Epoch     uint64
	Owner     string
	// Prev is the seq before Entries[0] and PrevEpoch the epoch of that
	// entry in the owner's log (both 0 when Entries start at seq 1).
	Prev, PrevEpoch uint64
	Entries         []Entry
	Sends           []Send
	// Header is the owner's; its seq fields describe the owner's log (the
	// copy computes its own), and Epoch and Owner are set from the fields
	// above.
	Header Header
	// Context, when non-nil, replaces the stored context.
	Context []byte
	// Adopt is set by a claiming owner taking the best copy it found into
	// its own store: the fence is not checked, and everything held after
	// Header.LastSeq is truncated.
	Adopt bool
}

// ErrDiverged: a copy does not hold the entry before the shipped ones
// under the epoch the owner has; ship from further back.
var ErrDiverged = errors.New("wal: copy diverged from the owner's log")

// Store takes c durably. It fails with ErrStaleEpoch when the copy was
// fenced by a newer owner, and with ErrSeqGap when c's entries do not
// reach back to what the copy holds (the owner must ship from earlier).
// It is idempotent: entries the copy already holds under c's epoch are
// skipped. A claim this node holds on the session (it was the owner) is
// dropped when a newer owner's copy arrives.
func (l *Log) Store(ctx context.Context, c Copy) error {
	if err := CheckID(c.SessionID); err != nil {
		return err
	}
	_, err := l.submit(ctx, &request{kind: reqCopy, sid: c.SessionID, copy: &c})
	return err
}

// ClaimAt claims a session as Claim does, but with the given epoch, which
// must be newer than the stored one, or the stored one under the same
// owner (a claiming owner fences its own copy first): a new owner in a
// cluster takes an epoch above every copy it has seen. settled, when
// above the stored Header.Settled, replaces it (the claimant has just
// made this copy complete).
func (l *Log) ClaimAt(ctx context.Context, sid string, epoch, settled uint64) (SessionData, error) {
	if err := CheckID(sid); err != nil {
		return SessionData{}, err
	}
	r, err := l.submit(ctx, &request{kind: reqClaim, sid: sid, owner: l.cfg.NodeID, epoch: epoch, settled: settled})
	return r.result(), err
}

func (l *Log) applyCopy(b *pebble.Batch, staged map[string]*claim, r *request) error {
	c := r.copy
	sid := c.SessionID
	old, err := getHeader(b, sid)
	exists := err == nil
	var ce *CorruptError
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.As(err, &ce) {
		return err // an unreadable copy is replaced by the owner's
	}
	if !exists && !c.Adopt {
		if err := checkFenceRecord(b, c); err != nil {
			return err
		}
	}
	if exists && !c.Adopt {
		switch {
		case old.Epoch > c.Epoch:
			return fmt.Errorf("%w: %q is at epoch %d (owner %s), copy carries %d", ErrStaleEpoch, sid, old.Epoch, old.Owner, c.Epoch)
		case old.Epoch == c.Epoch && old.Owner != "" && old.Owner != c.Owner:
			return fmt.Errorf("%w: %q epoch %d belongs to %s, not %s", ErrStaleEpoch, sid, c.Epoch, old.Owner, c.Owner)
		}
	}
	held, heldEpoch := uint64(0), uint64(0)
	if exists {
		held, heldEpoch = old.LastSeq, old.LastEpoch
	}
	entries, err := l.overlap(b, c, held)
	if err != nil {
		return err
	}
	if n := len(entries); n > 0 {
		// Written below; anything held after them was truncated.
		held, heldEpoch = entries[n-1].Seq, entries[n-1].Epoch
	}
	newer := !exists || old.Epoch < c.Epoch || c.Adopt
	if last := c.Header.LastSeq; newer && last < held {
		// The new owner's log ends here: what the copy holds after it was
		// never acknowledged.
		if err := l.truncate(b, sid, last+1, held); err != nil {
			return err
		}
		held, heldEpoch = last, c.Header.LastEpoch
	}
	kv := &l.scratch
	kv.reset()
	for _, e := range entries {
		if e.Seq > held {
			break // truncated just above
		}
		if err := kv.entry(sid, e); err != nil {
			return fmt.Errorf("wal: encode entry %d of %q: %w", e.Seq, sid, err)
		}
	}
	for _, s := range c.Sends {
		kv.send(sid, s)
	}
	h := c.Header
	h.SessionID, h.Epoch, h.Owner, h.LastSeq, h.LastEpoch = sid, c.Epoch, c.Owner, held, heldEpoch
	if exists {
		h.Settled = max(h.Settled, old.Settled)
	}
	if exists && c.Adopt {
		h.Epoch = max(h.Epoch, old.Epoch)
	}
	if err := kv.header(sid, h); err != nil {
		return fmt.Errorf("wal: encode header of %q: %w", sid, err)
	}
	if c.Context != nil {
		kv.rawSession(prefixContext, sid, c.Context)
	}
	if err := kv.apply(b); err != nil {
		return err
	}
	if cl, ok := l.claimOf(staged, sid); ok && cl.epoch < c.Epoch && !c.Adopt {
		staged[sid] = nil // this node's ownership is over
	}
	return nil
}

// overlap checks c's entries against what the copy holds (up to held):
// the entry before them must be there under PrevEpoch, entries held under
// the same epoch are skipped, and from the first that differs on, the
// held ones are truncated. It returns the entries still to write.
func (l *Log) overlap(b *pebble.Batch, c *Copy, held uint64) ([]Entry, error) {
	sid := c.SessionID
	if len(c.Entries) == 0 {
		return nil, nil
	}
	from := c.Entries[0].Seq
	if from > held+1 {
		return nil, fmt.Errorf("%w: %q holds up to %d, copy starts at %d", ErrSeqGap, sid, held, from)
	}
	if prev := from - 1; prev > 0 && !c.Adopt {
		e, ok := l.heldEntry(b, sid, prev)
		if !ok || e.Epoch != c.PrevEpoch {
			return nil, fmt.Errorf("%w: %q at seq %d", ErrDiverged, sid, prev)
		}
	}
	for i, e := range c.Entries {
		if e.Seq > held {
			return c.Entries[i:], nil
		}
		if h, ok := l.heldEntry(b, sid, e.Seq); ok && h.Epoch == e.Epoch && !c.Adopt {
			continue
		}
		if err := l.truncate(b, sid, e.Seq, held); err != nil {
			return nil, err
		}
		return c.Entries[i:], nil
	}
	return nil, nil
}

func (l *Log) heldEntry(b *pebble.Batch, sid string, seq uint64) (Entry, bool) {
	v, err := getRaw(b, entryKey(sid, seq))
	if err != nil || v == nil {
		return Entry{}, false
	}
	e, err := decodeAt(sid, seq, v)
	return e, err == nil
}

// truncate deletes the entries lo..hi of sid and the send ids that point
// at them. The send ids are found by their own records (a range scan of
// the session's send keys), not by reading the entries' metadata, which
// is the actor's vocabulary and not the log's; a truncation is rare
// (a copy that diverged from its owner), so the scan costs little.
func (l *Log) truncate(b *pebble.Batch, sid string, lo, hi uint64) error {
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: sessionPrefix(prefixSend, sid), UpperBound: sessionEnd(prefixSend, sid)})
	if err != nil {
		return err
	}
	var stale [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		if v := it.Value(); len(v) == 8 && beUint64(v) >= lo && beUint64(v) <= hi {
			stale = append(stale, slices.Clone(it.Key()))
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, k := range stale {
		if err := b.Delete(k, nil); err != nil {
			return err
		}
	}
	return b.DeleteRange(entryKey(sid, lo), entryKey(sid, hi+1), nil)
}
