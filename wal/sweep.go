package wal

import (
	"context"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Deletable reports whether a session with header h may be deleted at now
// under the given retention: it is over (expired, completed, or
// interrupted past its window) and its last activity is older than the
// retention.
func Deletable(h Header, now time.Time, retention time.Duration) bool {
	over := h.Status.Terminal() ||
		(h.Status == StatusInterrupted && !h.ExpiresAt.IsZero() && !now.Before(h.ExpiresAt))
	return over && !now.Before(h.LastActiveAt.Add(retention))
}

// Sweep deletes every session that is Deletable at now and not claimed by
// a live owner, and every session whose header cannot be read once its
// newest entry is older than the retention (nothing can resume such a
// session, and it would otherwise stay forever). It returns how many it
// deleted. The caller (the session registry) runs it on a timer.
func (l *Log) Sweep(ctx context.Context, now time.Time, retention time.Duration) (int, error) {
	var victims []string
	var corrupt []string
	err := l.ScanHeaders(ctx, func(h Header) error {
		if Deletable(h, now, retention) {
			victims = append(victims, h.SessionID)
		}
		return nil
	}, func(ce *CorruptError) { corrupt = append(corrupt, ce.SessionID) })
	if err != nil {
		return 0, err
	}
	n := 0
	del := func(sid string, cond func(Header) bool) error {
		ok, err := l.DeleteSession(ctx, sid, cond)
		if ok {
			n++
		}
		return err
	}
	for _, sid := range victims {
		// The condition is checked again by the committer, against the
		// header as it is at the moment of deletion.
		if err := del(sid, func(h Header) bool { return Deletable(h, now, retention) }); err != nil {
			return n, err
		}
	}
	for _, sid := range corrupt {
		if t, ok := l.newestTime(sid); ok && now.Before(t.Add(retention)) {
			continue
		}
		// Should the header have been repaired meanwhile, it is kept.
		if err := del(sid, func(Header) bool { return false }); err != nil {
			return n, err
		}
	}
	return n, nil
}

// newestTime is the time of the newest readable entry of sid, the only
// clue to its last activity when its header is unreadable.
func (l *Log) newestTime(sid string) (time.Time, bool) {
	if err := l.open(); err != nil {
		return time.Time{}, false
	}
	defer l.closedMu.RUnlock()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: sessionPrefix(prefixEntry, sid), UpperBound: sessionEnd(prefixEntry, sid)})
	if err != nil {
		return time.Time{}, false
	}
	defer it.Close()
	for ok := it.Last(); ok; ok = it.Prev() {
		// The bound only keeps the float→int64 conversion sane; MaxInt32
		// (January 2038) would call every later entry "no clue" and let a
		// session with a bad header be deleted at once.
		if e, err := DecodeEntry(it.Value()); err == nil && e.Time > 0 && e.Time < 1<<40 {
			sec, frac := math.Modf(e.Time)
			return time.Unix(int64(sec), int64(frac*1e9)), true
		}
	}
	return time.Time{}, false
}
