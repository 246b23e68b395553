package actor

import (
	"context"
	"errors"

	"github.com/tether-dev/tether/actor/machine"
)

// Hibernation, the runner's half (the machine's is in
// actor/machine/hibernate.go). A quiet session's machine offers to leave
// memory (machine.Hibernate); the actor accepts only if no mail waits,
// refusing posts from then on, and its finish hands the connections to
// the registry's asleep map in the same lock that takes the actor out of
// actors — so that whoever looks finds the session either awake or
// asleep, never neither. What is left of the session is the map entry
// and, in each connection's Handle, a pointer to the stopped actor,
// emptied of its machine.
//
// Waking: a Handle whose post finds its actor stopped asleep activates the
// session again (Registry.get) and posts there. Every activation, for
// whatever reason (a frame, a shared attach, a tool, a takeover), takes
// the session's sleepers out of asleep and posts their Rejoin before
// anything else, so the clients never notice. A wake that cannot load the
// session closes them (CloseShutdown: reconnect), as do Evict and Close.

// hibernate accepts the machine's offer, unless mail came meanwhile (the
// next Tick offers again). Called from the draining goroutine.
func (a *actor) hibernate(e machine.Hibernate) {
	if a.inflight > 0 || a.turnCancel != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) > 0 {
		return
	}
	a.stopped, a.sleep = true, &e
	a.stopping = true
}

// gone reports whether the actor refuses posts: it stopped, or is
// stopping for good.
func (a *actor) gone() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopped
}

// slept reports whether the actor stopped by hibernating.
func (a *actor) slept() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sleep != nil
}

// fallAsleep replaces the finished actor a by its sleepers, or closes
// them if the registry closed meanwhile.
func (r *Registry) fallAsleep(a *actor) {
	r.mu.Lock()
	if r.actors[a.sid] == a {
		delete(r.actors, a.sid)
	}
	if r.closed {
		r.mu.Unlock()
		for _, c := range a.sleep.Conns {
			c.Close(machine.CloseShutdown, "node shutting down")
		}
		return
	}
	r.asleep[a.sid] = *a.sleep
	r.mu.Unlock()
	r.hibernations.Add(1)
}

// takeSleepers removes and returns what a hibernation of sid kept.
func (r *Registry) takeSleepers(sid string) (machine.Hibernate, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.asleep[sid]
	delete(r.asleep, sid)
	return h, ok
}

// closeSleepers closes the connections a hibernation of sid kept.
func (r *Registry) closeSleepers(sid string, why machine.CloseReason, msg string) {
	h, ok := r.takeSleepers(sid)
	if !ok {
		return
	}
	for _, c := range h.Conns {
		c.Close(why, msg)
	}
}

// closeAsleep closes the connections of every hibernated session.
func (r *Registry) closeAsleep(why machine.CloseReason, msg string) {
	r.mu.Lock()
	asleep := r.asleep
	r.asleep = make(map[string]machine.Hibernate)
	r.mu.Unlock()
	for _, h := range asleep {
		for _, c := range h.Conns {
			c.Close(why, msg)
		}
	}
}

// forgetSleeper drops c from sid's sleepers when others remain, and
// reports whether it did. The last one cannot just be dropped: its going
// starts the reconnect window, which the session's actor must write.
func (r *Registry) forgetSleeper(sid string, c machine.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.asleep[sid]
	if !ok || len(h.Conns) < 2 {
		return false
	}
	for i, x := range h.Conns {
		if x == c {
			h.Conns = append(h.Conns[:i:i], h.Conns[i+1:]...)
			r.asleep[sid] = h
			return true
		}
	}
	return false
}

// post queues ev for the session's actor, waking the session if the
// actor hibernated; a stopped actor that did not hibernate gives ErrGone.
func (h *Handle) post(ctx context.Context, ev machine.Event) error {
	for range attempts {
		a := h.a.Load()
		err := a.postWait(ctx, ev)
		if !errors.Is(err, ErrGone) || !a.slept() {
			return err
		}
		next, err := h.reg.get(ctx, h.SessionID)
		if err != nil {
			return err
		}
		h.a.CompareAndSwap(a, next)
	}
	return ErrGone
}

// detachAsleep is Detach for a connection whose actor hibernated: one
// of several sleepers is just dropped; the last wakes the session so that
// its actor starts the reconnect window. It never blocks.
func (h *Handle) detachAsleep() {
	r := h.reg
	if r.forgetSleeper(h.SessionID, h.conn) {
		return
	}
	if !r.hold() {
		return
	}
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, detachWakeTimeout)
		defer cancel()
		if err := h.post(ctx, machine.Detach{Conn: h.conn}); err != nil && !errors.Is(err, ErrGone) && r.ctx.Err() == nil {
			// The session stays active until the next boot's recovery
			// or another activation finds the connection gone.
			r.log.Warn("detach from a hibernated session", "session", h.SessionID, "err", err)
		}
	}()
}
