package actor

import (
	"context"
	"errors"

	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// snapshotActive reads the snapshot of sid from its actor, if one is in
// memory; ok is false when none is. The machine answers a Query with what
// is durable of the session; the entries memory does not hold are read
// here, on the caller's goroutine.
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
	reply := make(chan machine.View, 1)
	if err := a.postWait(ctx, machine.Query{Reply: reply}); err != nil {
		if errors.Is(err, ErrGone) {
			return Snapshot{}, false, nil // passivated meanwhile: the log has it
		}
		return Snapshot{}, false, err
	}
	var v machine.View
	select {
	case v = <-reply:
	case <-a.done:
		return Snapshot{}, false, nil
	case <-ctx.Done():
		return Snapshot{}, false, ctx.Err()
	}
	msgs, err := r.read(sid, v.Messages)
	if err != nil {
		return Snapshot{}, false, err
	}
	return r.snapshotOf(v, msgs), true, nil
}

// snapshotStored reads the snapshot of a passive session from the log.
func (r *Registry) snapshotStored(sid string) (Snapshot, error) {
	d, err := r.cfg.Journal.Load(sid)
	if err != nil {
		return Snapshot{}, err
	}
	v, dmg := machine.Stored(d)
	r.damaged(sid, dmg)
	last := d.Header.LastSeq
	msgs, err := r.cfg.Journal.Read(sid, 1, last+1, r.cfg.ReplayLimit, true)
	if err != nil {
		return Snapshot{}, err
	}
	return r.snapshotOf(v, msgs), nil
}

// snapshotOf is what v shows, with its newest messages that fit in
// MaxBatchBytes.
func (r *Registry) snapshotOf(v machine.View, msgs []wal.Entry) Snapshot {
	_, msgs = fitBytes(nil, msgs, r.cfg.MaxBatchBytes)
	return Snapshot{Header: v.Header, Context: v.Context, AgentContext: v.AgentContext, Pending: v.Pending,
		Messages: msgs}
}
