package actor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tether-dev/tether/wal"
)

// recoverAt brings a session left by a previous run up to date at boot.
// lastAlive is the last moment that run was known to be alive.
//
//   - active: the client was connected when the node stopped; the server
//     learns of that disconnect now, so the window starts now.
//   - interrupted: a window that had ended before lastAlive has ended; any
//     other is extended by the downtime, so a restart never expires a
//     session that was alive when the server stopped.
func (s *Session) recoverAt(boot, lastAlive time.Time) []Effect {
	s.out = nil
	h := &s.hdr
	switch {
	case h.Status == wal.StatusActive:
		s.markInterrupted(boot)
	case h.Status == wal.StatusInterrupted && !lastAlive.Before(h.ExpiresAt):
		s.expire(boot)
		return s.takeOut()
	case h.Status == wal.StatusInterrupted:
		if down := boot.Sub(lastAlive); down > 0 {
			h.ExpiresAt = h.ExpiresAt.Add(down)
		}
	default:
		return nil
	}
	s.appendBatch(nil, nil, false)
	return s.takeOut()
}

// hasWork reports whether the session owes the agent a turn or a tool run.
func (s *Session) hasWork() bool {
	return !s.hdr.Status.Terminal() && (s.st.Pending != nil || len(s.st.Turns) > 0)
}

// live reports whether a session counts against its user's limit.
func live(h wal.Header, now time.Time) bool {
	return !h.Status.Terminal() && !(h.Status == wal.StatusInterrupted && !now.Before(h.ExpiresAt))
}

// recoverAll runs recoverAt over every live session this node owns, then
// starts an actor for each that has work in flight: a disconnect is not a
// cancel, and neither is a restart. Copies held for other owners stay
// passive.
func (r *Registry) recoverAll(ctx context.Context) error {
	boot := r.clock.Now()
	lastAlive, ok, err := r.cfg.Store.LastAlive()
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if !ok {
		lastAlive = boot
	}
	var pending []string
	err = r.cfg.Store.ScanHeaders(ctx, func(h wal.Header) error {
		if !h.Status.Terminal() && r.cfg.Owns(h.SessionID) {
			pending = append(pending, h.SessionID)
			r.live[h.UserID]++
		}
		return nil
	}, nil)
	if err != nil {
		return fmt.Errorf("recover: scan: %w", err)
	}
	// Workers share the log's group commit, so recovery of many sessions
	// costs far fewer fsyncs than sessions.
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range r.cfg.MaxActivations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sid := range work {
				if err := r.recoverOne(ctx, sid, boot, lastAlive); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, sid := range pending {
		work <- sid
	}
	close(work)
	wg.Wait()
	if len(pending) > 0 {
		r.log.Info("recovered sessions", "count", len(pending), "last_alive", lastAlive)
	}
	return firstErr
}

func (r *Registry) recoverOne(ctx context.Context, sid string, boot, lastAlive time.Time) error {
	d, err := r.cfg.Journal.Claim(ctx, sid)
	if err != nil {
		return fmt.Errorf("recover %s: %w", sid, err)
	}
	st, err := decodeState(d.Header.State)
	if err != nil {
		r.corrupt(sid, "state", err)
	}
	s := newSession(r.sessionConfig(), d, st, contexts{}, nil, boot)
	s.stateDirty = err != nil
	effs := s.recoverAt(boot, lastAlive)
	for i := 0; i < len(effs); i++ {
		switch e := effs[i].(type) {
		case effAppend:
			e.batch.Epoch = d.Header.Epoch
			if err := appendSync(ctx, r.cfg.Journal, e.batch); err != nil {
				return fmt.Errorf("recover %s: %w", sid, err)
			}
			// What waited for the append (an expiry's effStatus) is
			// released only now.
			effs = append(effs, s.Step(boot, evAppended{id: e.id})...)
		case effStatus:
			r.ended(e.userID)
		}
	}
	if err := r.cfg.Journal.Release(ctx, sid, d.Header.Epoch); err != nil {
		return fmt.Errorf("recover %s: %w", sid, err)
	}
	if !s.hasWork() {
		return nil
	}
	if _, err := r.get(ctx, sid); err != nil {
		return fmt.Errorf("recover %s: %w", sid, err)
	}
	return nil
}

// sweep deletes the sessions whose retention has passed and recounts each
// user's live sessions (the count drifts: sessions expire in the log
// without an actor to tell).
func (r *Registry) sweep(ctx context.Context) error {
	now := r.clock.Now()
	n, err := r.cfg.Store.Sweep(ctx, now, r.cfg.Retention)
	if n > 0 {
		r.log.Info("retention sweep", "deleted", n)
	}
	if err != nil {
		return err
	}
	counts := make(map[string]int)
	err = r.cfg.Store.ScanHeaders(ctx, func(h wal.Header) error {
		if live(h, now) && r.cfg.Owns(h.SessionID) {
			counts[h.UserID]++
		}
		return nil
	}, nil)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.live = counts
	r.mu.Unlock()
	return nil
}
