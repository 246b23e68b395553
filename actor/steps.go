package actor

import (
	"context"
	"fmt"
	"maps"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal"
)

// startStep runs the engine for the turn answering userSeq in a goroutine
// the actor owns; a streaming engine's text comes back as evPart, its
// decision as evAction.
func (a *actor) startStep(userSeq, step uint64) {
	in, err := a.turnInput(userSeq)
	if err != nil {
		a.run(a.s.Step(a.reg.clock.Now(), evAction{step: step, userSeq: userSeq, err: err}))
		return
	}
	ctx, cancel := a.turnContext()
	a.turns.Add(1)
	go func() {
		defer a.turns.Done()
		defer cancel()
		var act engine.Action
		var err error
		if st, ok := a.reg.cfg.Engine.(engine.Streamer); ok {
			act, err = st.Stream(ctx, in, func(text string) {
				if ctx.Err() == nil {
					a.post(evPart{step: step, text: text})
				}
			})
		} else {
			act, err = a.reg.cfg.Engine.Next(ctx, in)
		}
		if ctx.Err() != nil {
			return // abandoned; a later activation picks the turn up again
		}
		a.post(evAction{step: step, userSeq: userSeq, action: act, err: err})
	}()
}

func (a *actor) runTool(c ToolCall) {
	run, ok := a.toolRun(c)
	if !ok {
		a.run(a.s.Step(a.reg.clock.Now(), evToolDone{callID: c.CallID, err: fmt.Errorf("unknown tool %q", c.Name)}))
		return
	}
	a.reg.toolRuns.Add(1)
	a.reg.log.Debug("tool run", "session", a.sid, "tool", c.Name, "call_id", c.CallID)
	ctx, cancel := a.turnContext()
	a.turns.Add(1)
	go func() {
		defer a.turns.Done()
		defer cancel()
		progress := func(p string) { a.post(evToolProgress{callID: c.CallID, partial: p}) }
		res, err := run(ctx, progress)
		if ctx.Err() != nil {
			// Cut short by shutdown or by the turn being abandoned: the
			// outcome is decided by whoever activates the session next.
			return
		}
		a.post(evToolDone{callID: c.CallID, result: res, err: err})
	}()
}

// toolRun is how call c runs: through the engine's RunCall when it
// declares tools per call, else through the named tool's Run.
func (a *actor) toolRun(c ToolCall) (func(context.Context, func(string)) (string, error), bool) {
	if cr, ok := a.reg.cfg.Engine.(engine.CallRunner); ok {
		in := engine.CallInput{SessionID: a.sid, UserID: a.s.hdr.UserID, CallID: c.CallID, Name: c.Name, Args: c.Args,
			Idempotent: c.Idempotent, Attempt: c.Attempts}
		return func(ctx context.Context, progress func(string)) (string, error) {
			return cr.RunCall(ctx, in, progress)
		}, true
	}
	t, ok := a.reg.cfg.Engine.Tool(c.Name)
	if !ok {
		return nil, false
	}
	return func(ctx context.Context, progress func(string)) (string, error) {
		return t.Run(ctx, c.Args, progress)
	}, true
}

// turnInput builds what the engine sees from the session's memory: the
// user entry, this turn's tool entries and the entries before it come
// from the tail, and only what has left the tail is read from the log.
func (a *actor) turnInput(userSeq uint64) (engine.TurnInput, error) {
	s := a.s
	user, err := a.entries(userSeq, userSeq+1)
	if err != nil {
		return engine.TurnInput{}, err
	}
	if len(user) != 1 {
		return engine.TurnInput{}, fmt.Errorf("user entry %d missing from the log", userSeq)
	}
	steps := make([]wal.Entry, 0, len(s.st.Steps))
	for _, seq := range s.st.Steps {
		e, err := a.entries(seq, seq+1)
		if err != nil {
			return engine.TurnInput{}, err
		}
		steps = append(steps, e...)
	}
	from := userSeq - min(userSeq-1, engine.HistoryLen)
	hist, err := a.entries(from, userSeq)
	if err != nil {
		return engine.TurnInput{}, err
	}
	in := engine.TurnInput{
		SessionID: a.sid, UserID: s.hdr.UserID, User: user[0], Steps: steps, History: hist,
		Context: maps.Clone(s.ctx.User), AgentContext: maps.Clone(s.ctx.Agent),
	}
	if from > 1 {
		// The first entry never changes: read it once per activation, so
		// steady-state turns read nothing from the store.
		if a.first == nil {
			first, err := a.entries(1, 2)
			if err != nil {
				return engine.TurnInput{}, err
			}
			a.first = first
		}
		in.Summary = summarize(1, from-1, a.first)
	}
	return in, nil
}

// entries returns the durable entries lo <= seq < hi, from the tail where
// it has them and from the log for what is older. The result is a copy.
func (a *actor) entries(lo, hi uint64) ([]wal.Entry, error) {
	hi = min(hi, a.s.durableSeq()+1)
	if lo >= hi {
		return nil, nil
	}
	out := make([]wal.Entry, 0, hi-lo)
	if f := a.s.tail.first(); lo < f {
		older, err := a.reg.cfg.Journal.Read(a.sid, lo, min(hi, f), int(min(hi, f)-lo), false)
		if err != nil {
			return nil, err
		}
		out = append(out, older...)
	}
	return a.s.tail.appendSpan(out, lo, hi), nil
}
