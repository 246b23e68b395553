package actor

import (
	"context"
	"fmt"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// startStep runs the engine for the turn e asks for in a goroutine the
// actor owns; a streaming engine's text comes back as Part, its decision
// as StepDone.
func (a *actor) startStep(e machine.RunStep) {
	in, err := a.turnInput(e)
	if err != nil {
		a.postFront(machine.StepDone{Step: e.Step, UserSeq: e.UserSeq, Err: err})
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
					a.post(machine.Part{Step: e.Step, Text: text})
				}
			})
		} else {
			act, err = a.reg.cfg.Engine.Next(ctx, in)
		}
		if ctx.Err() != nil {
			return // abandoned; a later activation picks the turn up again
		}
		a.post(machine.StepDone{Step: e.Step, UserSeq: e.UserSeq, Action: act, Err: err})
	}()
}

func (a *actor) runTool(e machine.RunTool) {
	c := e.Call
	run, ok := a.toolRun(e)
	if !ok {
		a.postFront(machine.ToolDone{CallID: c.CallID, Err: fmt.Errorf("unknown tool %q", c.Name)})
		return
	}
	a.reg.toolRuns.Add(1)
	a.reg.log.Debug("tool run", "session", a.sid, "tool", c.Name, "call_id", c.CallID)
	ctx, cancel := a.turnContext()
	a.turns.Add(1)
	go func() {
		defer a.turns.Done()
		defer cancel()
		progress := func(p string) { a.post(machine.ToolProgress{CallID: c.CallID, Partial: p}) }
		res, err := run(ctx, progress)
		if ctx.Err() != nil {
			// Cut short by shutdown or by the turn being abandoned: the
			// outcome is decided by whoever activates the session next.
			return
		}
		a.post(machine.ToolDone{CallID: c.CallID, Result: res, Err: err})
	}()
}

// toolRun is how the call runs: through the engine's RunCall when it
// declares tools per call, else through the named tool's Run.
func (a *actor) toolRun(e machine.RunTool) (func(context.Context, func(string)) (string, error), bool) {
	c := e.Call
	if cr, ok := a.reg.cfg.Engine.(engine.CallRunner); ok {
		in := engine.CallInput{SessionID: e.SessionID, UserID: e.UserID, CallID: c.CallID, Name: c.Name, Args: c.Args,
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

// turnInput completes what the engine sees with the turn's entries: the
// machine's memory holds them in the common case, and only what has left
// it is read from the log.
func (a *actor) turnInput(e machine.RunStep) (engine.TurnInput, error) {
	in := e.Input
	user, err := a.read(e.User)
	if err != nil {
		return engine.TurnInput{}, err
	}
	if len(user) != 1 {
		return engine.TurnInput{}, fmt.Errorf("user entry %d missing from the log", e.UserSeq)
	}
	in.User = user[0]
	in.Steps = make([]wal.Entry, 0, len(e.Steps))
	for _, sp := range e.Steps {
		step, err := a.read(sp)
		if err != nil {
			return engine.TurnInput{}, err
		}
		in.Steps = append(in.Steps, step...)
	}
	if in.History, err = a.read(e.History); err != nil {
		return engine.TurnInput{}, err
	}
	if e.History.Lo > 1 {
		// The first entry never changes: read it once per activation, so
		// steady-state turns read nothing from the store.
		if a.first == nil {
			if a.first, err = a.read(e.First); err != nil {
				return engine.TurnInput{}, err
			}
		}
		in.Summary = summarize(1, e.History.Lo-1, a.first)
	}
	return in, nil
}
