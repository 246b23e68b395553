package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tether-dev/tether/actor/machine"
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
	if h, ok := r.takeSleepers(a.sid); ok {
		a.post(machine.Rejoin(h))
	}
	a.post(machine.Start{})
	return nil
}

// start brings a, just put in r.actors, to life: it brings the session
// up to date first when rec is set, then activates it — unless this is a
// pass of recovery alone (bootPass) and the session has nothing in flight
// (errIdle). Whoever waits on a.ready() finds the outcome in a.startErr.
func (r *Registry) start(ctx context.Context, a *actor, rec *machine.Recover, bootPass bool) error {
	var err error
	if rec != nil {
		var work bool
		work, err = r.recoverOne(ctx, a.sid, *rec)
		if err == nil && !work && bootPass {
			err = errIdle
		}
	}
	if err == nil {
		err = r.activate(ctx, a)
	}
	if err != nil {
		if !errors.Is(err, errIdle) {
			// The connections a hibernation kept have no session here now.
			r.closeSleepers(a.sid, machine.CloseShutdown, "the session could not be loaded here; reconnect")
		}
		r.failed(a, err)
		return err
	}
	close(a.readyCh)
	return nil
}

// failed ends a, registered but never given a machine: whoever waits on
// a.ready() finds err in a.startErr.
func (r *Registry) failed(a *actor, err error) {
	a.startErr = err
	// It has no machine: whoever found it meanwhile (Close, Evict) must
	// not be able to post to it.
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	r.remove(a)
	close(a.done)
	close(a.readyCh)
}

// register adds the actor of a session being created, unless the
// registry closed or the session is active already (then it exists).
func (r *Registry) register(a *actor) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if _, ok := r.actors[a.sid]; ok {
		return fmt.Errorf("%w: session %s is active", wal.ErrExists, a.sid)
	}
	r.actors[a.sid] = a
	return nil
}

// load builds the machine of a claimed session: its state and context,
// its newest entries with one range read, and, only when the log holds
// more than those, the filter of its older send ids. A state or context
// that cannot be read is reported and started afresh (and rewritten by the
// next append), so bad stored data never makes a session unreachable.
func (r *Registry) load(d wal.SessionData) (*machine.Machine, error) {
	sid := d.Header.SessionID
	newest, err := r.cfg.Journal.Read(sid, 1, d.Header.LastSeq+1, r.cfg.TailEntries, true)
	if err != nil {
		return nil, err
	}
	rs := machine.Restore{Data: d, Newest: newest}
	if len(newest) > 0 && newest[0].Seq > 1 {
		err := r.cfg.Journal.ScanSends(sid, func(id string, seq uint64) {
			if seq < newest[0].Seq {
				rs.OlderSends = append(rs.OlderSends, id)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	s, dmg := machine.New(r.sessionConfig(), rs, r.clock.Now())
	r.damaged(sid, dmg)
	return s, nil
}

// damaged reports the stored data of sid that could not be decoded.
func (r *Registry) damaged(sid string, d machine.Damage) {
	if d.State != nil {
		r.corrupt(sid, "state", d.State)
	}
	if d.Context != nil {
		r.corrupt(sid, "context", d.Context)
	}
}

func (r *Registry) corrupt(sid, what string, err error) {
	r.corrupted.Add(1)
	r.log.Error("unreadable session data; starting it afresh", "session", sid, "what", what, "err", err)
}

// interruptLater starts the reconnect window of a session whose actor
// failed while a client was attached (the client was closed with 1011 and
// its detach reached no actor), once that actor is gone. It runs in the
// session's slot of the registry, as the boot pass does: a client that
// resumes meanwhile waits for it and then activates the session afresh,
// so the two never claim the session at once (a claim's fence ends the
// other's, and in a cluster one's pull can truncate what the other has
// just loaded). If an actor got there first, that actor is told instead.
// It is best effort: if the store still fails, the next boot's recovery
// does it.
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
		now := r.clock.Now()
		rec := machine.Recover{Boot: now, LastAlive: now}
		for {
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				return
			}
			cur := r.actors[sid]
			if cur == nil {
				p := newActor(r, sid)
				r.actors[sid] = p
				r.mu.Unlock()
				if err := r.start(ctx, p, &rec, true); err != nil && !errors.Is(err, errIdle) {
					r.log.Error("interrupt failed session", "session", sid, "err", err)
				}
				return
			}
			r.mu.Unlock()
			// Another activation got there first: once it runs, it
			// is told (interrupted only if no client is attached by
			// the time it steps this: machine.Recover).
			select {
			case <-cur.ready():
			case <-ctx.Done():
				return
			}
			if cur.startErr == nil && cur.post(rec) {
				return
			}
			select { // it failed or is leaving: the slot frees
			case <-cur.done:
			case <-ctx.Done():
				return
			}
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
	Pending      *machine.ToolCall
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
	if err := machine.MayReveal(h, authTime, now, r.cfg.ReauthMaxAge); err != nil {
		return Snapshot{}, err
	}
	// A session the boot pass has not reached yet is recovered first, as
	// a resume would: the log still says what it was before the restart.
	if err := r.recoverBoot(ctx, sid); err != nil && !errors.Is(err, errIdle) {
		return Snapshot{}, err
	}
	snap, ok, err := r.snapshotActive(ctx, sid)
	if !ok && err == nil {
		snap, err = r.snapshotStored(sid)
	}
	if err != nil {
		return Snapshot{}, err
	}
	if err := machine.MayReveal(snap.Header, authTime, now, r.cfg.ReauthMaxAge); err != nil {
		return Snapshot{}, err
	}
	snap.Status = snap.Header.Status
	if snap.Status == wal.StatusInterrupted && !now.Before(snap.Header.ExpiresAt) {
		snap.Status = wal.StatusExpired
	}
	return snap, nil
}
