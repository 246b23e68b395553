package actor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// actor owns one Session. Events wait in its mailbox; a goroutine steps
// the machine with them one at a time and carries out the effects. That
// goroutine runs only while there is mail: an idle session costs no
// goroutine and no timer (the registry's ticker looks at Deadline for
// it). Only one goroutine at a time ever touches the machine: the mailbox
// lock hands the state over, as raft's node hands its RawNode to one loop.
type actor struct {
	reg *Registry
	sid string

	// readyCh is closed once activation finished; startErr says how.
	readyCh  chan struct{}
	startErr error

	mu       sync.Mutex
	queue    []machine.Event    // the mailbox
	running  bool               // a goroutine is draining the mailbox
	stopped  bool               // the actor is gone: posts are refused
	sleep    *machine.Hibernate // it stopped by hibernating, keeping these
	notFull  chan struct{}
	done     chan struct{} // closed when the actor is gone
	deadline atomic.Int64  // unix nanos of s.Deadline(), 0 for none

	// Owned by the goroutine draining the mailbox.
	s          *machine.Machine
	epoch      uint64
	inflight   int  // appends handed to the journal, not yet answered
	stopping   bool // a Stop ran: finish once nothing is in flight
	turnCancel context.CancelFunc
	turns      sync.WaitGroup
	first      []wal.Entry // the session's first entry, once read (summaries)
	flushTimer Timer       // the pending Flush of a streamed reply
}

func newActor(r *Registry, sid string) *actor {
	return &actor{reg: r, sid: sid, done: make(chan struct{}), readyCh: make(chan struct{})}
}

func (a *actor) ready() <-chan struct{} { return a.readyCh }

// post queues an event from inside the node (the journal, the actor's
// own turn goroutines, the registry). It never blocks, so the journal's
// committer can call it; it reports false when the actor is gone.
func (a *actor) post(ev machine.Event) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return false
	}
	a.queue = append(a.queue, ev)
	a.wake()
	return true
}

// postFront puts ev at the head of the mailbox: the answer to an effect
// the actor's goroutine is carrying out (a send id looked up, an append
// the journal refused at once), which the machine must take before any
// other event, as if the effect had answered at once. Called only from
// the goroutine draining the mailbox, so the actor is running.
func (a *actor) postFront(ev machine.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	a.queue = append(a.queue, nil)
	copy(a.queue[1:], a.queue)
	a.queue[0] = ev
}

// postWait queues an event from a client, waiting while the mailbox holds
// MailboxSize events: a client that floods its session is slowed down.
func (a *actor) postWait(ctx context.Context, ev machine.Event) error {
	for {
		a.mu.Lock()
		if a.stopped {
			a.mu.Unlock()
			return ErrGone
		}
		if len(a.queue) < a.reg.cfg.MailboxSize {
			a.queue = append(a.queue, ev)
			if a.running {
				a.mu.Unlock()
				return nil
			}
			// Nobody drains the mailbox: the client's goroutine does it
			// here, sparing a hand-over to another goroutine per frame,
			// for a few events at most (it has the client's next frames
			// to read).
			a.running = true
			a.reg.wg.Add(1)
			a.mu.Unlock()
			a.drainSome(inlineEvents)
			return nil
		}
		if a.notFull == nil {
			a.notFull = make(chan struct{})
		}
		wait := a.notFull
		a.mu.Unlock()
		select {
		case <-wait:
		case <-a.done:
			return ErrGone
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wake starts the draining goroutine if none runs. Called with mu held.
func (a *actor) wake() {
	if a.running {
		return
	}
	a.running = true
	a.reg.wg.Add(1)
	a.reg.workers.Go(a.drain)
}

// inlineEvents is how many events a client's goroutine handles itself
// before it hands the rest of the mailbox to a drain of its own.
const inlineEvents = 8

// drain steps the machine with every queued event, then exits.
func (a *actor) drain() { a.drainSome(-1) }

// drainSome steps the machine with up to n queued events (n < 0: every
// one), then exits; if events remain, a drain on another goroutine takes
// them over (and the running mark and the registry's count with them).
func (a *actor) drainSome(n int) {
	for ; ; n-- {
		a.mu.Lock()
		if len(a.queue) == 0 || a.stopped {
			a.running = false
			a.mu.Unlock()
			a.reg.wg.Done()
			return
		}
		if n == 0 {
			a.mu.Unlock()
			a.reg.workers.Go(a.drain)
			return
		}
		ev := a.queue[0]
		a.queue[0] = nil
		a.queue = a.queue[1:]
		if len(a.queue) == 0 {
			a.queue = nil // an idle actor keeps no buffer
		}
		if a.notFull != nil && len(a.queue) < a.reg.cfg.MailboxSize {
			close(a.notFull)
			a.notFull = nil
		}
		a.mu.Unlock()
		a.handle(ev)
		if a.stopping && a.inflight == 0 {
			a.finish()
		}
	}
}

func (a *actor) handle(ev machine.Event) {
	if _, ok := ev.(machine.Appended); ok {
		a.inflight--
	}
	a.run(a.s.Step(a.reg.clock.Now(), ev))
	if d := a.s.Deadline(); d.IsZero() {
		a.deadline.Store(0)
	} else {
		a.deadline.Store(d.UnixNano())
	}
}

// run carries out effects in order. What an effect learns comes back as
// an event through the mailbox, never by stepping the machine from here.
func (a *actor) run(effs []machine.Effect) {
	for _, e := range effs {
		switch e := e.(type) {
		case machine.Append:
			a.appendAsync(e)
		case machine.Deliver:
			if e.Conn != nil {
				e.Conn.Deliver(e.Out)
			}
		case machine.CloseConn:
			if e.Conn != nil {
				e.Conn.Close(e.Why, e.Msg)
			}
		case machine.Replay:
			a.replay(e)
		case machine.History:
			a.history(e)
		case machine.LookupSend:
			a.lookupSend(e.Send)
		case machine.RunStep:
			a.startStep(e)
		case machine.FlushAfter:
			if a.flushTimer != nil {
				a.flushTimer.Stop()
			}
			a.flushTimer = a.reg.clock.AfterFunc(e.After, func() { a.post(machine.Flush{}) })
		case machine.RunTool:
			a.runTool(e)
		case machine.CancelTurn:
			a.cancelTurn()
		case machine.Answer:
			if e.Reply != nil {
				e.Reply <- e.Result // buffered
			}
		case machine.Report:
			e.Reply <- e.View // buffered
		case machine.Ended:
			a.reg.ended(e.UserID)
		case machine.Fail:
			a.fail(e)
		case machine.Stop:
			a.stopping = true
		case machine.Hibernate:
			a.hibernate(e)
		default:
			// A bug (TestEveryEventAndEffectHandled guards against it):
			// the session shuts down rather than run without the effect.
			a.reg.log.Error("unknown effect; stopping the session", "session", a.sid, "effect", fmt.Sprintf("%T", e))
			a.postFront(machine.Shutdown{})
		}
	}
}

func (a *actor) appendAsync(e machine.Append) {
	e.Batch.Epoch = a.epoch
	id := e.ID
	// Every append is answered by one Appended, from the journal or, when
	// it was not even queued (shutting down), from here: nothing of it is
	// durable, so nothing after it may be shown.
	a.inflight++
	err := a.reg.cfg.Journal.AppendAsync(a.reg.ctx, e.Batch, func(err error) {
		a.post(machine.Appended{ID: id, Err: err})
	})
	if err != nil {
		a.postFront(machine.Appended{ID: id, Err: err})
	}
}

func (a *actor) lookupSend(send machine.Send) {
	seq, found, err := a.reg.cfg.Journal.SendSeq(a.sid, send.ID)
	if err != nil {
		a.reg.log.Warn("look up send id", "session", a.sid, "err", err)
		found = false // an unreadable record cannot be a duplicate we can prove
	}
	a.postFront(machine.SendChecked{Send: send, Seq: seq, Found: found})
}

// fail stops the actor after a storage failure the machine reported (it
// has closed its clients already): its memory may be ahead of the log, so
// it is dropped and rebuilt from the log by the next activation. A
// session whose client was attached is marked interrupted once the actor
// is gone.
func (a *actor) fail(e machine.Fail) {
	switch {
	case e.Moved:
		a.reg.log.Warn("session owned elsewhere; stepping down", "session", a.sid, "err", e.Err)
	case errors.Is(e.Err, machine.ErrUnavailable):
		a.reg.log.Warn("session unavailable; stepping down", "session", a.sid, "err", e.Err)
	default:
		a.reg.log.Error("session actor failed", "session", a.sid, "err", e.Err)
	}
	if e.Interrupt {
		a.reg.interruptLater(a.sid)
	}
	a.stopping = true
}

// finish ends the actor: no more posts, its turn goroutines stopped, its
// claim released, out of the registry.
func (a *actor) finish() {
	a.mu.Lock()
	a.stopped = true
	a.queue = nil
	if a.notFull != nil {
		close(a.notFull)
		a.notFull = nil
	}
	a.mu.Unlock()
	a.cancelTurn()
	a.turns.Wait()
	if a.flushTimer != nil {
		a.flushTimer.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.reg.cfg.Journal.Release(ctx, a.sid, a.epoch); err != nil && !errors.Is(err, context.Canceled) {
		a.reg.log.Warn("release session", "session", a.sid, "err", err)
	}
	if a.sleep != nil {
		a.s, a.first = nil, nil // what the hibernation frees
		a.reg.fallAsleep(a)
	} else {
		a.reg.remove(a)
	}
	close(a.done)
}

// turnContext makes the context of the one step or tool run in flight;
// its goroutine cancels it when done, cancelTurn when abandoning it.
func (a *actor) turnContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a.reg.ctx)
	a.turnCancel = cancel
	return ctx, cancel
}

func (a *actor) cancelTurn() {
	if a.turnCancel != nil {
		a.turnCancel()
		a.turnCancel = nil
	}
}
