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
	m := &s.meta
	switch {
	case m.Status == wal.StatusActive:
		s.markInterrupted(boot)
	case m.Status == wal.StatusInterrupted && !lastAlive.Before(m.ExpiresAt):
		return s.expire(boot)
	case m.Status == wal.StatusInterrupted:
		if down := boot.Sub(lastAlive); down > 0 {
			m.ExpiresAt = m.ExpiresAt.Add(down)
		}
	default:
		return nil
	}
	return []Effect{s.appendMeta()}
}

// hasWork reports whether the session owes the agent a turn or a tool run.
func (s *Session) hasWork() bool {
	return !s.meta.Status.Terminal() && (s.meta.Pending != nil || len(s.meta.Turns) > 0)
}

// recoverAll runs recoverAt over every live session of the store, then
// starts an actor for each that has work in flight: a disconnect is not a
// cancel, and neither is a restart.
func (r *Registry) recoverAll(ctx context.Context) error {
	boot := r.cfg.Now()
	lastAlive, ok, err := r.cfg.Store.LastAlive()
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if !ok {
		lastAlive = boot
	}
	var live []string
	err = r.cfg.Store.ScanMeta(ctx, func(m wal.Meta) error {
		if !m.Status.Terminal() {
			live = append(live, m.SessionID)
		}
		return nil
	}, func(err error) { r.cfg.Logger.Error("recover: skipping unreadable session", "err", err) })
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
	for _, sid := range live {
		work <- sid
	}
	close(work)
	wg.Wait()
	if len(live) > 0 {
		r.cfg.Logger.Info("recovered sessions", "count", len(live), "last_alive", lastAlive)
	}
	return firstErr
}

func (r *Registry) recoverOne(ctx context.Context, sid string, boot, lastAlive time.Time) error {
	m, err := r.cfg.Journal.Claim(ctx, sid)
	if err != nil {
		return fmt.Errorf("recover %s: %w", sid, err)
	}
	s := newSession(r.sessionConfig(), m, boot)
	for _, e := range s.recoverAt(boot, lastAlive) {
		if ap, ok := e.(effAppend); ok {
			b := wal.Batch{SessionID: sid, Epoch: m.Epoch, Entries: ap.entries, Meta: ap.meta}
			if err := r.cfg.Journal.Append(ctx, b); err != nil {
				return fmt.Errorf("recover %s: %w", sid, err)
			}
		}
	}
	if !s.hasWork() {
		return r.cfg.Journal.Release(ctx, sid, m.Epoch)
	}
	a := newActor(r, sid)
	r.mu.Lock()
	r.actors[sid] = a
	r.mu.Unlock()
	r.launch(a, s.Meta(), nil)
	return nil
}

// interruptAfterFailure starts the reconnect window of a session whose
// actor failed while a client was attached: the client was closed with
// 1011, and its detach reached no actor. It is best effort: if the store
// still fails, the next boot's recovery does it.
func (r *Registry) interruptAfterFailure(sid string) {
	ctx := context.Background()
	m, err := r.cfg.Journal.Claim(ctx, sid)
	if err != nil {
		r.cfg.Logger.Error("interrupt failed session", "session", sid, "err", err)
		return
	}
	if m.Status == wal.StatusActive {
		s := newSession(r.sessionConfig(), m, r.cfg.Now())
		s.markInterrupted(r.cfg.Now())
		if err := r.cfg.Journal.Append(ctx, wal.Batch{SessionID: sid, Epoch: m.Epoch, Meta: s.Meta()}); err != nil {
			r.cfg.Logger.Error("interrupt failed session", "session", sid, "err", err)
		}
	}
	if err := r.cfg.Journal.Release(ctx, sid, m.Epoch); err != nil {
		r.cfg.Logger.Warn("release session", "session", sid, "err", err)
	}
}
