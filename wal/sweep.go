package wal

import (
	"context"
	"errors"
	"time"
)

// Deletable reports whether a session with metadata m may be deleted at
// now under the given retention: it is over (expired, completed, or
// interrupted past its window) and its last activity is older than the
// retention.
func Deletable(m Meta, now time.Time, retention time.Duration) bool {
	over := m.Status.Terminal() ||
		(m.Status == StatusInterrupted && !m.ExpiresAt.IsZero() && !now.Before(m.ExpiresAt))
	return over && !now.Before(m.LastActiveAt.Add(retention))
}

// Sweep deletes every session that is Deletable now and not claimed by a
// live owner. It returns how many it deleted.
func (l *Log) Sweep(ctx context.Context) (int, error) {
	now := l.cfg.Now()
	var victims []string
	err := l.ScanMeta(ctx, func(m Meta) error {
		if Deletable(m, now, l.cfg.Retention) {
			victims = append(victims, m.SessionID)
		}
		return nil
	}, func(err error) { l.cfg.Logger.Warn("sweep: skipping session", "err", err) })
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sid := range victims {
		// The condition is checked again by the committer, against the
		// metadata as it is at the moment of deletion.
		ok, err := l.DeleteSession(ctx, sid, func(m Meta) bool { return Deletable(m, now, l.cfg.Retention) })
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

func (l *Log) sweepLoop() {
	defer l.done.Done()
	t := time.NewTicker(l.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			n, err := l.Sweep(l.ctx)
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
				l.cfg.Logger.Error("retention sweep failed", "err", err)
			} else if n > 0 {
				l.cfg.Logger.Info("retention sweep", "deleted", n)
			}
		}
	}
}
