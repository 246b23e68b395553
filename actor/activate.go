package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tether-dev/tether/wal"
)

// activate claims a's session, loads it into memory and starts it.
func (r *Registry) activate(ctx context.Context, a *actor) error {
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.sem }()
	d, err := r.cfg.Journal.Claim(ctx, a.sid)
	if err != nil {
		return err
	}
	s, err := r.load(d)
	if err != nil {
		_ = r.cfg.Journal.Release(context.Background(), a.sid, d.Header.Epoch)
		return fmt.Errorf("actor: load session %s: %w", a.sid, err)
	}
	a.s, a.epoch = s, d.Header.Epoch
	r.activations.Add(1)
	a.post(evStart{})
	return nil
}

// load builds the machine of a claimed session: its state and context,
// its newest entries with one range read, and, only when the log holds
// more than those, the filter of its older send ids. A state or context
// that cannot be read is reported and started afresh (and rewritten by the
// next append), so bad stored data never makes a session unreachable.
func (r *Registry) load(d wal.SessionData) (*Session, error) {
	sid := d.Header.SessionID
	st, err := decodeState(d.Header.State)
	stateBad := err != nil
	if stateBad {
		r.corrupt(sid, "state", err)
		st = state{}
	}
	cx, err := decodeContexts(d.Context)
	contextBad := err != nil
	if contextBad {
		r.corrupt(sid, "context", err)
		cx = contexts{}
	}
	newest, err := r.cfg.Journal.Read(sid, 1, d.Header.LastSeq+1, r.cfg.TailEntries, true)
	if err != nil {
		return nil, err
	}
	s := newSession(r.sessionConfig(), d, st, cx, newest, r.clock.Now())
	s.stateDirty, s.contextDirty = stateBad, contextBad
	if first := s.tail.first(); d.Header.LastSeq > 0 && first > 1 {
		err := r.cfg.Journal.ScanSends(sid, func(id string, seq uint64) {
			if seq < first {
				s.sends.addOlder(id)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (r *Registry) corrupt(sid, what string, err error) {
	r.corrupted.Add(1)
	r.log.Error("unreadable session data; starting it afresh", "session", sid, "what", what, "err", err)
}

// interruptLater starts the reconnect window of a session whose actor
// failed while a client was attached (the client was closed with 1011 and
// its detach reached no actor), once that actor is gone. It is best
// effort: if the store still fails, the next boot's recovery does it.
func (r *Registry) interruptLater(sid string) {
	r.mu.Lock()
	a := r.actors[sid]
	if r.closed || a == nil {
		r.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		<-a.done
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		defer cancel()
		d, err := r.cfg.Journal.Claim(ctx, sid)
		if err != nil {
			r.log.Error("interrupt failed session", "session", sid, "err", err)
			return
		}
		defer func() { _ = r.cfg.Journal.Release(context.Background(), sid, d.Header.Epoch) }()
		if d.Header.Status != wal.StatusActive {
			return
		}
		s := newSession(r.sessionConfig(), d, state{}, contexts{}, nil, r.clock.Now())
		s.markInterrupted(r.clock.Now())
		b := &wal.Batch{SessionID: sid, Epoch: d.Header.Epoch, Header: s.hdr}
		if err := appendSync(ctx, r.cfg.Journal, b); err != nil {
			r.log.Error("interrupt failed session", "session", sid, "err", err)
		}
	}()
}

// appendSync appends b and waits for it.
func appendSync(ctx context.Context, j Journal, b *wal.Batch) error {
	done := make(chan error, 1)
	if err := j.AppendAsync(ctx, b, func(err error) { done <- err }); err != nil {
		return err
	}
	return <-done
}

// Snapshot is a session as GET /v1/sessions/{id} shows it.
type Snapshot struct {
	Header wal.Header
	// Status is Header.Status, with an interrupted session whose window has
	// passed shown as expired.
	Status       wal.Status
	Context      map[string]any
	AgentContext map[string]any
	Pending      *ToolCall
	// Messages are the newest ReplayLimit entries (at most MaxBatchBytes).
	Messages []wal.Entry
}

// Snapshot reads a session for its owner. Another user's session gives
// ErrNotFound, exactly like an unknown id; a sensitive one without a fresh
// login ErrReauthRequired (MayReveal). An active session answers from its
// actor's memory (what is durable of it); a passive one from the log.
func (r *Registry) Snapshot(ctx context.Context, sid, user string, authTime time.Time) (Snapshot, error) {
	if wal.CheckID(sid) != nil {
		return Snapshot{}, ErrNotFound
	}
	h, err := r.cfg.Journal.Header(sid)
	switch {
	case errors.Is(err, wal.ErrNotFound) || errors.Is(err, wal.ErrCorrupt):
		return Snapshot{}, ErrNotFound
	case err != nil:
		return Snapshot{}, err
	case h.UserID != user:
		return Snapshot{}, ErrNotFound
	}
	now := r.clock.Now()
	if err := MayReveal(h, authTime, now, r.cfg.ReauthMaxAge); err != nil {
		return Snapshot{}, err
	}
	snap, ok, err := r.snapshotActive(ctx, sid)
	if !ok && err == nil {
		snap, err = r.snapshotStored(sid)
	}
	if err != nil {
		return Snapshot{}, err
	}
	if err := MayReveal(snap.Header, authTime, now, r.cfg.ReauthMaxAge); err != nil {
		return Snapshot{}, err
	}
	snap.Status = snap.Header.Status
	if snap.Status == wal.StatusInterrupted && !now.Before(snap.Header.ExpiresAt) {
		snap.Status = wal.StatusExpired
	}
	return snap, nil
}
