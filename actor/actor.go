package actor

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/tether-dev/tether/wal"
)

// actor is the goroutine that owns one Session: it takes events from its
// mailbox one at a time, steps the machine and carries out the effects.
// It is the only writer of its session's log.
type actor struct {
	reg     *Registry
	sid     string
	mailbox chan mail
	// ready is closed once activation finished; startErr says how.
	ready    chan struct{}
	startErr error
	// stopping is closed when the loop has decided to stop: turn
	// goroutines give up posting. done is closed when the actor is gone
	// (claim released, out of the registry): callers waiting on it retry.
	stopping chan struct{}
	done     chan struct{}

	// Owned by the loop goroutine.
	s          *Session
	epoch      uint64
	stopped    bool
	failed     bool // stopped by a storage failure with a client attached
	turnCancel context.CancelFunc
	turns      sync.WaitGroup
}

// mail is one mailbox item: an event, and for an attach, where to answer.
type mail struct {
	ev    any
	reply chan<- effOpened
}

func newActor(r *Registry, sid string) *actor {
	return &actor{
		reg:      r,
		sid:      sid,
		mailbox:  make(chan mail, r.cfg.MailboxSize),
		ready:    make(chan struct{}),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// loop runs the actor until an effStop, a failure or registry shutdown.
func (a *actor) loop(m wal.Meta) {
	defer a.finish()
	a.epoch = m.Epoch
	a.s = newSession(a.reg.sessionConfig(), m, a.reg.cfg.Now())
	a.run(a.s.Step(evStart{now: a.reg.cfg.Now()}))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for !a.stopped {
		a.arm(timer)
		select {
		case ml := <-a.mailbox:
			a.handle(ml)
		case <-timer.C:
			a.run(a.s.Step(evTick{now: a.reg.cfg.Now()}))
		case <-a.reg.ctx.Done():
			a.run(a.s.Step(evShutdown{}))
		}
	}
}

func (a *actor) arm(t *time.Timer) {
	d := a.s.Deadline()
	if d.IsZero() {
		t.Stop()
		return
	}
	t.Reset(max(d.Sub(a.reg.cfg.Now()), 0))
}

func (a *actor) handle(ml mail) {
	ev := ml.ev
	if send, ok := ev.(evSend); ok && send.conn == a.s.conn {
		seq, found, err := a.reg.cfg.Journal.SendSeq(a.sid, send.id)
		if err != nil {
			a.fail(fmt.Errorf("look up send id: %w", err))
			return
		}
		if found {
			send.prevSeq = seq
		}
		ev = send
	}
	effs := a.s.Step(ev)
	for i, e := range effs {
		if o, ok := e.(effOpened); ok && ml.reply != nil {
			// Answer the hello once its state change is durable and its
			// session frame (and replay) are queued to the client.
			a.run(effs[:i])
			if a.stopped {
				return
			}
			a.run(effs[i+1:])
			ml.reply <- o // buffered
			return
		}
	}
	a.run(effs)
}

// run carries out effects in order. A failed append stops the actor
// before anything after it becomes visible.
func (a *actor) run(effs []Effect) {
	for _, e := range effs {
		if a.stopped {
			return
		}
		switch e := e.(type) {
		case effAppend:
			b := wal.Batch{SessionID: a.sid, Epoch: a.epoch, Entries: e.entries, Sends: e.sends, Meta: e.meta}
			if err := a.reg.cfg.Journal.Append(context.Background(), b); err != nil {
				a.fail(fmt.Errorf("append: %w", err))
				return
			}
		case effDeliver:
			if e.conn != nil {
				e.conn.Deliver(e.out)
			}
		case effClose:
			if e.conn != nil {
				e.conn.Close(e.code, e.reason)
			}
		case effReplay:
			a.replay(e)
		case effHistory:
			a.history(e)
		case effStep:
			a.startStep(e.userSeq)
		case effRunTool:
			a.runTool(e.call)
		case effCancelTurn:
			a.cancelTurn()
		case effStop:
			a.stopped = true
		case effOpened:
			// Only meaningful with a reply channel (handle).
		}
	}
}

// fail stops the actor: its in-memory state may be ahead of the log, so it
// is dropped and rebuilt from the log by the next activation.
func (a *actor) fail(err error) {
	a.reg.cfg.Logger.Error("session actor failed", "session", a.sid, "err", err)
	if c := a.s.conn; c != nil {
		c.Deliver(&ErrorOut{Code: "internal", Message: "session storage failed; reconnect to resume"})
		c.Close(CloseInternal, "internal error")
		a.failed = true
	}
	a.stopped = true
}

func (a *actor) finish() {
	close(a.stopping)
	a.cancelTurn()
	a.turns.Wait()
	if err := a.reg.cfg.Journal.Release(context.Background(), a.sid, a.epoch); err != nil {
		a.reg.cfg.Logger.Warn("release session", "session", a.sid, "err", err)
	}
	if a.failed {
		// Still in the registry's map, so no other actor can claim it.
		a.reg.interruptAfterFailure(a.sid)
	}
	a.reg.remove(a.sid, a)
	close(a.done)
}

// post is how the actor's own goroutines (engine steps, tools) report.
func (a *actor) post(ev any) {
	select {
	case a.mailbox <- mail{ev: ev}:
	case <-a.stopping:
	}
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

func (a *actor) startStep(userSeq uint64) {
	in, err := a.turnInput(userSeq)
	if err != nil {
		a.run(a.s.Step(evAction{userSeq: userSeq, err: err, now: a.reg.cfg.Now()}))
		return
	}
	ctx, cancel := a.turnContext()
	a.turns.Add(1)
	go func() {
		defer a.turns.Done()
		defer cancel()
		act, err := a.reg.cfg.Engine.Next(ctx, in)
		if ctx.Err() != nil {
			return // abandoned; a later activation picks the turn up again
		}
		a.post(evAction{userSeq: userSeq, action: act, err: err, now: a.reg.cfg.Now()})
	}()
}

func (a *actor) runTool(c wal.ToolCall) {
	t, ok := a.reg.cfg.Engine.Tool(c.Name)
	if !ok {
		a.run(a.s.Step(evToolDone{callID: c.CallID, err: fmt.Errorf("unknown tool %q", c.Name), now: a.reg.cfg.Now()}))
		return
	}
	a.reg.toolRuns.Add(1)
	ctx, cancel := a.turnContext()
	a.turns.Add(1)
	go func() {
		defer a.turns.Done()
		defer cancel()
		progress := func(p string) {
			a.post(evToolProgress{callID: c.CallID, partial: p, now: a.reg.cfg.Now()})
		}
		res, err := t.Run(ctx, c.Args, progress)
		if ctx.Err() != nil {
			// Cut short by shutdown or by the turn being abandoned: the
			// outcome is decided by whoever activates the session next.
			return
		}
		a.post(evToolDone{callID: c.CallID, result: res, err: err, now: a.reg.cfg.Now()})
	}()
}

// turnInput rebuilds what the engine sees from the log.
func (a *actor) turnInput(userSeq uint64) (TurnInput, error) {
	j := a.reg.cfg.Journal
	user, err := j.ReadAfter(a.sid, userSeq-1, 1)
	if err != nil {
		return TurnInput{}, err
	}
	if len(user) != 1 || user[0].Seq != userSeq {
		return TurnInput{}, fmt.Errorf("user entry %d missing from the log", userSeq)
	}
	m := a.s.Meta()
	steps := make([]wal.Entry, 0, len(m.Steps))
	for _, seq := range m.Steps {
		e, err := j.ReadAfter(a.sid, seq-1, 1)
		if err != nil {
			return TurnInput{}, err
		}
		if len(e) != 1 {
			return TurnInput{}, fmt.Errorf("tool entry %d missing from the log", seq)
		}
		steps = append(steps, e[0])
	}
	hist, err := j.ReadBefore(a.sid, userSeq, HistoryLen)
	if err != nil {
		return TurnInput{}, err
	}
	return TurnInput{
		SessionID: a.sid, User: user[0], Steps: steps, History: hist,
		Context: maps.Clone(m.Context), AgentContext: maps.Clone(m.AgentContext),
	}, nil
}

// AsUint reads an unsigned number out of decoded metadata, whatever width
// msgpack or JSON gave it.
func AsUint(v any) uint64 {
	switch n := v.(type) {
	case uint64:
		return n
	case uint32:
		return uint64(n)
	case uint16:
		return uint64(n)
	case uint8:
		return uint64(n)
	case int64:
		return uint64(max(n, 0))
	case int32:
		return uint64(max(n, 0))
	case int16:
		return uint64(max(n, 0))
	case int8:
		return uint64(max(n, 0))
	case int:
		return uint64(max(n, 0))
	case float64:
		return uint64(max(n, 0))
	}
	return 0
}
