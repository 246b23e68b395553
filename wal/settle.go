package wal

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tether-dev/tether/wal/record"
)

// A session's header changes with every append only in the fields its
// entries imply: LastSeq (the last entry's seq), LastEpoch (the epoch the
// entries were written under, which is the header's Epoch: appends are
// fenced by it) and LastActiveAt (the time of the last entry, as the actor
// sets it, to the millisecond). Rewriting the header for that was a quarter of the keys of a
// typical append, and a tenth of the server's CPU under a steady load of
// sends. So an append whose header is implied by the one last written
// (impliedBy) writes none, and every read of a header brings it up to date
// from the session's last entry (settle). Anything else that changes (the
// status, the actor's state, the owner) writes the header as before.

// impliedBy reports whether next, the header of an append whose last
// entry is last, differs from prev, the header last written, only in the
// fields that entry implies (its LastActiveAt within a millisecond of the
// entry's time: the entry keeps its time in float seconds).
func impliedBy(prev, next Header, last Entry) bool {
	d := next.LastActiveAt.Sub(entryTime(last))
	return prev.SessionID == next.SessionID && prev.UserID == next.UserID &&
		prev.Status == next.Status && prev.CreatedAt.Equal(next.CreatedAt) &&
		prev.InterruptedAt.Equal(next.InterruptedAt) && prev.ExpiresAt.Equal(next.ExpiresAt) &&
		prev.Epoch == next.Epoch && prev.Owner == next.Owner &&
		prev.Sensitive == next.Sensitive && bytes.Equal(prev.State, next.State) && prev.Settled == next.Settled &&
		next.LastSeq == last.Seq && next.LastEpoch == next.Epoch &&
		!next.LastActiveAt.Before(prev.LastActiveAt) && d > -time.Millisecond && d < time.Millisecond
}

// entryTime is an entry's time as a time.Time, to the microsecond.
func entryTime(e Entry) time.Time { return time.UnixMicro(int64(math.Round(e.Time * 1e6))) }

// settle brings h, as read from r, up to date with the session's last
// entry, which appends implied by h may have written after it.
func settle(r pebble.Reader, h *Header) error {
	lo := sessionPrefix(prefixEntry, h.SessionID)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: sessionEnd(prefixEntry, h.SessionID)})
	if err != nil {
		return fmt.Errorf("wal: read the last entry of %q: %w", h.SessionID, err)
	}
	defer it.Close()
	if !it.Last() {
		return it.Error()
	}
	k := it.Key()
	if len(k) != len(lo)+8 {
		return nil // not an entry key: left to the readers of entries
	}
	seq := beUint64(k[len(lo):])
	if seq <= h.LastSeq {
		return nil
	}
	h.LastSeq, h.LastEpoch = seq, h.Epoch
	// The time is the last entry's; one that cannot be read (it reads
	// back as a stand-in) leaves the header's.
	if v, err := it.ValueAndErr(); err == nil {
		if e, err := record.DecodeEntry(v); err == nil && e.Time > 0 {
			if t := entryTime(e); t.After(h.LastActiveAt) {
				h.LastActiveAt = t
			}
		}
	}
	return nil
}
