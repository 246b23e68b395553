package wal

import (
	"context"
	"errors"
	"testing"
)

// A fence raises a copy's epoch without touching its entries: the old
// owner's appends and shipments are refused from then on, the new owner's
// taken, and the copy's head is reported after the fence.
func TestFenceRefusesTheOldOwner(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	h := mustCreate(t, l, activeHeader("fence1"))
	mustAppend(t, l, batch(h, h.Epoch, 1, 3))

	f, err := l.Fence(ctx, "fence1", 10, "other")
	if err != nil {
		t.Fatal(err)
	}
	if !f.Found || f.Header.LastSeq != 3 || f.Header.Epoch != 10 || f.Header.Owner != "other" || f.PrevEpoch != h.Epoch {
		t.Fatalf("fence answered %+v", f)
	}
	// This node's own claim ended with it.
	if err := l.Append(ctx, batch(h, h.Epoch, 4, 4)); !errors.Is(err, ErrNotClaimed) && !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("append under the fenced epoch: %v", err)
	}
	// A shipment of the old epoch is refused; the new owner's is taken.
	old := Copy{SessionID: "fence1", Epoch: h.Epoch, Owner: h.Owner, Prev: 3, PrevEpoch: h.Epoch, Entries: entries(4, 4), Header: batch(h, h.Epoch, 4, 4).Header}
	if err := l.Store(ctx, old); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("old owner's copy after the fence: %v", err)
	}
	nw := old
	nw.Epoch, nw.Owner = 10, "other"
	if err := l.Store(ctx, nw); err != nil {
		t.Fatalf("new owner's copy: %v", err)
	}
	checkEntries(t, "after the new owner's copy", readAll(t, l, "fence1"), span(1, 4))

	// A fence below the copy's epoch, or at it for another owner, fails
	// and says where the copy is.
	for _, tc := range []struct {
		epoch uint64
		owner string
	}{{9, "third"}, {10, "third"}} {
		f, err := l.Fence(ctx, "fence1", tc.epoch, tc.owner)
		if !errors.Is(err, ErrStaleEpoch) || f.Header.Epoch != 10 {
			t.Fatalf("fence at %d by %s: %+v, %v", tc.epoch, tc.owner, f, err)
		}
	}
	// The same owner may fence again at its epoch (a retried claim).
	if _, err := l.Fence(ctx, "fence1", 10, "other"); err != nil {
		t.Fatalf("the same fence again: %v", err)
	}
}

// A node holding no copy keeps a fence record: an old owner's copy
// shipped to it later is refused, the fencing owner's is taken, and the
// record goes with the session.
func TestFenceRecordWithoutACopy(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	f, err := l.Fence(ctx, "fence2", 20, "new")
	if err != nil || f.Found {
		t.Fatalf("fence of a missing session: %+v, %v", f, err)
	}
	h := activeHeader("fence2")
	h.LastSeq = 2
	stale := Copy{SessionID: "fence2", Epoch: 5, Owner: "old", Entries: entries(1, 2), Header: h}
	if err := l.Store(ctx, stale); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("old owner's first copy: %v", err)
	}
	if _, err := l.Header("fence2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused copy left a header: %v", err)
	}
	if _, err := l.Fence(ctx, "fence2", 19, "older"); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("an older fence: %v", err)
	}
	good := stale
	good.Epoch, good.Owner = 20, "new"
	if err := l.Store(ctx, good); err != nil {
		t.Fatalf("the fencing owner's copy: %v", err)
	}
	checkEntries(t, "stored", readAll(t, l, "fence2"), span(1, 2))
	if ok, err := l.DeleteSession(ctx, "fence2", nil); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if _, err := l.Fence(ctx, "fence2", 1, "anyone"); err != nil {
		t.Fatalf("the fence record outlived the session: %v", err)
	}
}

// ClaimAt takes the epoch its owner fenced with, and keeps the largest
// Settled.
func TestClaimAtAfterFence(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	h := mustCreate(t, l, activeHeader("fence3"))
	mustRelease(t, l, "fence3", h.Epoch)
	if _, err := l.Fence(ctx, "fence3", 30, l.cfg.NodeID); err != nil {
		t.Fatal(err)
	}
	d, err := l.ClaimAt(ctx, "fence3", 30, 7)
	if err != nil {
		t.Fatalf("claim at the fenced epoch: %v", err)
	}
	if d.Header.Epoch != 30 || d.Header.Settled != 7 {
		t.Fatalf("claimed %+v", d.Header)
	}
	mustRelease(t, l, "fence3", 30)
	if d, err = l.ClaimAt(ctx, "fence3", 31, 3); err != nil || d.Header.Settled != 7 {
		t.Fatalf("a later claim lowered Settled: %+v, %v", d.Header, err)
	}
}
