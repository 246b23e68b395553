package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Fenced is what Fence found: the copy's header after the fence (Found
// false when this node holds no copy of the session) and the epoch the
// copy was at before it.
type Fenced struct {
	Found     bool
	Header    Header
	PrevEpoch uint64
}

// Fence raises a session's owner epoch on this node's copy to epoch,
// naming owner, without touching its entries: from then on the copy
// refuses what an older epoch ships (Store), so the owner that wrote
// under it can acknowledge nothing more. A claiming owner in a cluster
// fences the copies first and reads them after (what it reads then is
// everything the old owner ever acknowledged). A node with no copy keeps
// a fence record, so a copy an old owner ships to it later is refused
// too. It fails with ErrStaleEpoch (and the current header, when there
// is one) when the copy is at a newer epoch, or at this one under another
// owner. A claim this node holds under an older epoch ends.
func (l *Log) Fence(ctx context.Context, sid string, epoch uint64, owner string) (Fenced, error) {
	if err := CheckID(sid); err != nil {
		return Fenced{}, err
	}
	r, err := l.submit(ctx, &request{kind: reqFence, sid: sid, owner: owner, epoch: epoch})
	if r.fenced == nil {
		return Fenced{}, err
	}
	return *r.fenced, err
}

func (l *Log) applyFence(b *pebble.Batch, staged map[string]*claim, r *request) error {
	h, err := getHeader(b, r.sid)
	var ce *CorruptError
	switch {
	case errors.Is(err, ErrNotFound) || errors.As(err, &ce):
		fe, fo, err := getFence(b, r.sid)
		if err != nil {
			return err
		}
		if fe > r.epoch || fe == r.epoch && fo != r.owner {
			r.fenced = &Fenced{PrevEpoch: fe}
			return fmt.Errorf("%w: %q is fenced at epoch %d (owner %s), fence asks for %d", ErrStaleEpoch, r.sid, fe, fo, r.epoch)
		}
		r.fenced = &Fenced{PrevEpoch: fe}
		return b.Set(fenceKey(r.sid), encodeFence(r.epoch, r.owner), nil)
	case err != nil:
		return err
	}
	if h.Epoch > r.epoch || h.Epoch == r.epoch && h.Owner != "" && h.Owner != r.owner {
		r.fenced = &Fenced{Found: true, Header: h, PrevEpoch: h.Epoch}
		return fmt.Errorf("%w: %q is at epoch %d (owner %s), fence asks for %d", ErrStaleEpoch, r.sid, h.Epoch, h.Owner, r.epoch)
	}
	prev := h.Epoch
	h.Epoch, h.Owner = r.epoch, r.owner
	kv := &l.scratch
	kv.reset()
	if err := kv.header(r.sid, h); err != nil {
		return fmt.Errorf("wal: encode header of %q: %w", r.sid, err)
	}
	if err := kv.apply(b); err != nil {
		return err
	}
	if cl, ok := l.claimOf(staged, r.sid); ok && (cl.epoch < r.epoch || cl.owner != r.owner) {
		staged[r.sid] = nil // this node's ownership is over
	}
	r.fenced = &Fenced{Found: true, Header: h, PrevEpoch: prev}
	return nil
}

// checkFenceRecord refuses a copy of a session this node holds no copy of
// when a fence record names a newer epoch (or this one under another
// owner).
func checkFenceRecord(b *pebble.Batch, c *Copy) error {
	fe, fo, err := getFence(b, c.SessionID)
	if err != nil {
		return err
	}
	if fe > c.Epoch || fe == c.Epoch && fo != "" && fo != c.Owner {
		return fmt.Errorf("%w: %q is fenced at epoch %d (owner %s), copy carries %d", ErrStaleEpoch, c.SessionID, fe, fo, c.Epoch)
	}
	return nil
}

// A fence record is the epoch (8 bytes, big endian) and the owner's id.
func encodeFence(epoch uint64, owner string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, epoch), owner...)
}

func getFence(b *pebble.Batch, sid string) (uint64, string, error) {
	v, err := getRaw(b, fenceKey(sid))
	if err != nil || v == nil {
		return 0, "", err
	}
	if len(v) < 8 {
		return 0, "", fmt.Errorf("wal: fence record of %q is %d bytes", sid, len(v))
	}
	return binary.BigEndian.Uint64(v), string(v[8:]), nil
}
