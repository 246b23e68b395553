package actor

import (
	"context"
	"maps"

	"github.com/tether-dev/tether/wal"
)

// evQuery runs fn on the actor's goroutine, between two events: how the
// registry reads an active session's memory without sharing it.
type evQuery struct {
	fn   func(a *actor)
	done chan struct{}
}

func (evQuery) isEvent() {}

// query runs fn on a's goroutine and waits for it.
func (a *actor) query(ctx context.Context, fn func(a *actor)) error {
	q := evQuery{fn: fn, done: make(chan struct{})}
	if err := a.postWait(ctx, q); err != nil {
		return err
	}
	select {
	case <-q.done:
		return nil
	case <-a.done:
		return ErrGone
	case <-ctx.Done():
		return ctx.Err()
	}
}

// snapshotActive reads the snapshot of sid from its actor, if one is in
// memory; ok is false when none is.
func (r *Registry) snapshotActive(ctx context.Context, sid string) (snap Snapshot, ok bool, err error) {
	r.mu.Lock()
	a := r.actors[sid]
	r.mu.Unlock()
	if a == nil {
		return Snapshot{}, false, nil
	}
	select {
	case <-a.ready():
	case <-ctx.Done():
		return Snapshot{}, false, ctx.Err()
	}
	if a.startErr != nil {
		return Snapshot{}, false, nil
	}
	var readErr error
	err = a.query(ctx, func(a *actor) {
		s := a.s
		snap = Snapshot{
			Header: s.hdr, Context: maps.Clone(s.ctx.User), AgentContext: maps.Clone(s.ctx.Agent),
		}
		snap.Header.LastSeq = s.durableSeq()
		if p := s.st.Pending; p != nil {
			cp := *p
			snap.Pending = &cp
		}
		last := s.durableSeq()
		var msgs []wal.Entry
		msgs, readErr = a.entries(last-min(last, uint64(r.cfg.ReplayLimit))+1, last+1)
		snap.Messages = a.fitBytes(msgs)
	})
	if err == ErrGone {
		return Snapshot{}, false, nil // passivated meanwhile: the log has it
	}
	if err == nil {
		err = readErr
	}
	return snap, err == nil, err
}

// snapshotStored reads the snapshot of a passive session from the log.
func (r *Registry) snapshotStored(sid string) (Snapshot, error) {
	d, err := r.cfg.Journal.Load(sid)
	if err != nil {
		return Snapshot{}, err
	}
	st, err := decodeState(d.Header.State)
	if err != nil {
		r.corrupt(sid, "state", err)
	}
	cx, err := decodeContexts(d.Context)
	if err != nil {
		r.corrupt(sid, "context", err)
	}
	last := d.Header.LastSeq
	msgs, err := r.cfg.Journal.Read(sid, 1, last+1, r.cfg.ReplayLimit, true)
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Header: d.Header, Context: cx.User, AgentContext: cx.Agent, Pending: st.Pending, Messages: msgs}
	total := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if total += msgs[i].Size(); total > r.cfg.MaxBatchBytes && i < len(msgs)-1 {
			snap.Messages = msgs[i+1:]
			break
		}
	}
	return snap, nil
}
