package machine

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine/machinetest"

	"github.com/tether-dev/tether/wal/record"
)

// appendedEntry is the one entry effs append.
func appendedEntry(t *testing.T, effs []Effect) record.Entry {
	t.Helper()
	ap := one[Append](t, effs)
	if len(ap.Batch.Entries) != 1 {
		t.Fatalf("appended %+v, want one entry", ap.Batch.Entries)
	}
	return ap.Batch.Entries[0]
}

func TestSessionActionReply(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "one"})
	durable(s, t0, Send{Conn: c, ID: "m2", Content: "two"})

	effs := durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "r1", AgentContext: map[string]any{"x": 1.0}}})
	wantTypes(t, "reply", effs, Append{}, Deliver{}, RunStep{})
	e := appendedEntry(t, effs)
	if e.Seq != 3 || e.Role != engine.RoleAgent || e.Content != "r1" || e.Metadata["reply_to"] != uint64(1) {
		t.Fatalf("reply entry = %+v", e)
	}
	if cx, err := decodeContexts(effs[0].(Append).Batch.Context); err != nil || cx.Agent["x"] != 1.0 {
		t.Fatalf("the agent context was not written with the reply: %+v %v", cx, err)
	}
	if st := effs[2].(RunStep); st.UserSeq != 2 || !slices.Equal(s.st.Turns, []uint64{2}) {
		t.Fatalf("next step = %+v, turns %v", st, s.st.Turns)
	}
	// A stale answer for the finished turn is dropped.
	if effs := s.Step(t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "late"}}); len(effs) != 0 {
		t.Fatalf("stale action: %v", effTypes(effs))
	}
	effs = durable(s, t0, StepDone{Step: s.step, UserSeq: 2, Err: errors.New("model down")})
	wantTypes(t, "error reply", effs, Append{}, Deliver{})
	if e := appendedEntry(t, effs); e.Seq != 4 || e.Role != engine.RoleSystem || e.Content != "agent error: model down" {
		t.Fatalf("error entry = %+v", e)
	}
	if s.busy || len(s.st.Turns) != 0 {
		t.Fatalf("busy %v turns %v after the last turn", s.busy, s.st.Turns)
	}
}

func TestSessionToolCall(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "find laptops"})
	args := map[string]any{"query": "laptops"}
	effs := durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search", Args: args}}})
	wantTypes(t, "call", effs, Append{}, Deliver{}, RunTool{})
	e := appendedEntry(t, effs)
	wantMD := map[string]any{"call_id": "call-2", "name": "search", "status": engine.ToolStarted, "reply_to": uint64(1), "args": args}
	if e.Seq != 2 || e.Role != engine.RoleTool || !reflect.DeepEqual(e.Metadata, wantMD) {
		t.Fatalf("started entry = %+v", e)
	}
	want := ToolCall{CallID: "call-2", Name: "search", Args: args, Status: engine.ToolStarted, StartedSeq: 2, ReplyTo: 1}
	if call := effs[2].(RunTool).Call; !reflect.DeepEqual(call, want) {
		t.Fatalf("run = %+v, want %+v", call, want)
	}
	if st, _ := decodeState(effs[0].(Append).Batch.Header.State); st.Pending == nil || st.Pending.CallID != "call-2" {
		t.Fatalf("the pending call is not in the appended state: %+v", st)
	}
	if s.hdr.Sensitive {
		t.Fatal("a plain tool marked the session sensitive")
	}
	// While the tool runs the engine cannot answer the turn.
	if effs := s.Step(t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "too early"}}); len(effs) != 0 {
		t.Fatalf("action during a tool run: %v", effTypes(effs))
	}
	effs = durable(s, t0, ToolProgress{CallID: "call-2", Partial: "1 of 3"})
	wantTypes(t, "progress", effs, Append{})
	if st, _ := decodeState(effs[0].(Append).Batch.Header.State); st.Pending.Partial != "1 of 3" {
		t.Fatalf("progress state = %+v", st.Pending)
	}
	for _, ev := range []Event{ToolProgress{CallID: "call-9", Partial: "x"}, ToolDone{CallID: "call-9", Result: "x"}} {
		if effs := s.Step(t0, ev); len(effs) != 0 {
			t.Fatalf("%T of another call: %v", ev, effTypes(effs))
		}
	}
	effs = durable(s, t0, ToolDone{CallID: "call-2", Result: "3 results"})
	wantTypes(t, "tool done", effs, Append{}, Deliver{}, RunStep{})
	e = appendedEntry(t, effs)
	if e.Seq != 3 || e.Content != "3 results" || machinetest.MetaString(e, "status") != engine.ToolCompleted || machinetest.MetaString(e, "result") != "3 results" ||
		machinetest.MetaString(e, "call_id") != "call-2" || s.st.Pending != nil || !slices.Equal(s.st.Steps, []uint64{2, 3}) {
		t.Fatalf("completed entry = %+v, state %+v", e, s.st)
	}
	if effs := s.Step(t0, ToolDone{CallID: "call-2", Result: "again"}); len(effs) != 0 {
		t.Fatalf("second result: %v", effTypes(effs))
	}
	wantTypes(t, "reply", durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "done"}}), Append{}, Deliver{})
	if s.st.Steps != nil || s.busy {
		t.Fatalf("state after the turn: %+v", s.st)
	}
}

func TestSessionToolFailedAndSensitive(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "q"})
	durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search"}}})
	e := appendedEntry(t, durable(s, t0, ToolDone{CallID: "call-2", Err: errors.New("boom")}))
	if machinetest.MetaString(e, "status") != engine.ToolFailed || e.Content != "boom" || machinetest.MetaString(e, "result") != "boom" {
		t.Fatalf("failed entry = %+v", e)
	}

	s, c = newAttached(t)
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "pay rent"})
	effs := s.Step(t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "payment"}}})
	// The mark is durable before the sensitive tool runs.
	if ap := one[Append](t, effs); !ap.Batch.Header.Sensitive || !s.hdr.Sensitive || len(only[RunTool](effs)) != 0 {
		t.Fatalf("sensitive tool: %v, header %+v", effTypes(effs), ap.Batch.Header)
	}
}

func TestSessionMaxSteps(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "loop"})
	// Each call logs two steps: its started entry and its result.
	for i := range maxSteps / 2 {
		effs := durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search"}}})
		call := one[RunTool](t, effs).Call
		durable(s, t0, ToolDone{CallID: call.CallID, Result: "again"})
		if len(s.st.Steps) != 2*(i+1) {
			t.Fatalf("steps %v", s.st.Steps)
		}
	}
	effs := durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search"}}})
	e := appendedEntry(t, effs)
	if e.Role != engine.RoleSystem || !strings.Contains(e.Content, "more than 32 steps") || len(only[RunTool](effs)) != 0 {
		t.Fatalf("call beyond maxSteps: %+v", e)
	}
	if s.busy || s.st.Steps != nil || len(s.st.Turns) != 0 {
		t.Fatalf("the turn did not end: %+v", s.st)
	}
}

func TestSessionContext(t *testing.T) {
	s, c := newAttached(t)
	set := func(set map[string]any, want map[string]any, sensitive bool) {
		t.Helper()
		effs := durable(s, t0, SetContext{Conn: c, Set: set})
		wantTypes(t, "context", effs, Append{}, Deliver{})
		ap := effs[0].(Append)
		got := effs[1].(Deliver).Out.(*ContextOut).Context
		cx, err := decodeContexts(ap.Batch.Context)
		if err != nil || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(cx.User, want) {
			t.Fatalf("set %v: out %v, appended %v (%v), want %v", set, got, cx.User, err, want)
		}
		if s.hdr.Sensitive != sensitive || ap.Batch.Header.Sensitive != sensitive {
			t.Fatalf("set %v: sensitive %v, want %v", set, s.hdr.Sensitive, sensitive)
		}
	}
	set(map[string]any{"goal": "compare laptops", "lang": "zh"}, map[string]any{"goal": "compare laptops", "lang": "zh"}, false)
	set(map[string]any{"lang": nil, "budget": 900.0}, map[string]any{"goal": "compare laptops", "budget": 900.0}, false)
	set(map[string]any{"sensitive": false}, map[string]any{"goal": "compare laptops", "budget": 900.0, "sensitive": false}, false)
	set(map[string]any{"sensitive": true}, map[string]any{"goal": "compare laptops", "budget": 900.0, "sensitive": true}, true)
	// Nothing clears the mark.
	set(map[string]any{"sensitive": false}, map[string]any{"goal": "compare laptops", "budget": 900.0, "sensitive": true}, true)
	set(map[string]any{"sensitive": nil, "goal": nil}, map[string]any{"budget": 900.0, "sensitive": true}, true)

	// The ContextOut is a copy.
	out := outs(durable(s, t0, SetContext{Conn: c, Set: map[string]any{"a": 1.0}}))[0].(*ContextOut)
	durable(s, t0, SetContext{Conn: c, Set: map[string]any{"b": 2.0}})
	if _, ok := out.Context["b"]; ok {
		t.Fatal("ContextOut shares the session's map")
	}

	// Over MaxContextBytes: too_large, nothing changed or appended.
	before, ctxBefore, appends := s.Header(), maps.Clone(s.ctx.User), s.nextID
	effs := s.Step(t0, SetContext{Conn: c, Set: map[string]any{"big": strings.Repeat("x", 2000)}})
	wantTypes(t, "too large", effs, Deliver{})
	if e, ok := effs[0].(Deliver).Out.(*ErrorOut); !ok || e.Code != CodeTooLarge {
		t.Fatalf("refusal = %+v", effs[0])
	}
	if s.nextID != appends || !reflect.DeepEqual(s.Header(), before) || !reflect.DeepEqual(s.ctx.User, ctxBefore) {
		t.Fatal("a refused context changed the session")
	}
	// Shrinking is always allowed, and a send after it writes no context.
	wantTypes(t, "delete", durable(s, t0, SetContext{Conn: c, Set: map[string]any{"budget": nil}}), Append{}, Deliver{})
	if ap := one[Append](t, s.Step(t0, Send{Conn: c, ID: "m1", Content: "x"})); ap.Batch.Context != nil {
		t.Fatal("a send rewrote an unchanged context")
	}
}

func TestSessionComplete(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		s, c := exchanged(t)
		effs := durable(s, t0, Complete{Conn: c})
		wantTypes(t, "complete", effs, CancelTurn{}, Append{}, Deliver{}, CloseConn{}, Ended{}, Stop{})
		if ap := effs[1].(Append); len(ap.Batch.Entries) != 0 || ap.Batch.Header.Status != record.StatusCompleted {
			t.Fatalf("append = %+v", ap)
		}
		if d := effs[2].(Deliver); !reflect.DeepEqual(d.Out, &CompletedOut{SessionID: "s1"}) {
			t.Fatalf("deliver = %+v", d)
		}
		if cl := effs[3].(CloseConn); cl.Conn != c || cl.Why != CloseCompleted {
			t.Fatalf("close = %+v", cl)
		}
		if st := effs[4].(Ended); st.Status != record.StatusCompleted || st.UserID != "alice" {
			t.Fatalf("status = %+v", st)
		}
		if s.hdr.Status != record.StatusCompleted || len(s.conns) != 0 {
			t.Fatal("not completed")
		}
	})
	t.Run("pending tool", func(t *testing.T) {
		s, c := newAttached(t)
		durable(s, t0, Send{Conn: c, ID: "m1", Content: "q"})
		durable(s, t0, Send{Conn: c, ID: "m2", Content: "q2"})
		durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search"}}})
		effs := durable(s, t0, Complete{Conn: c})
		// The abandoned call's entry reaches the client before completed.
		wantTypes(t, "complete", effs, CancelTurn{}, Append{}, Deliver{}, Deliver{}, CloseConn{}, Ended{}, Stop{})
		e := appendedEntry(t, effs)
		if e.Seq != 4 || e.Role != engine.RoleTool || machinetest.MetaString(e, "status") != engine.ToolFailed || machinetest.MetaString(e, "call_id") != "call-3" ||
			e.Content != "cancelled: session completed" {
			t.Fatalf("abandoned call entry = %+v", e)
		}
		if d := effs[2].(Deliver); d.Out.(*EntryOut).Entry.Seq != 4 {
			t.Fatalf("first deliver = %+v", d)
		}
		if st, _ := decodeState(effs[1].(Append).Batch.Header.State); st.Pending != nil || len(st.Turns) != 0 {
			t.Fatalf("state after complete = %+v", st)
		}
		// The tool's late result and the engine's late answer are dropped.
		for _, ev := range []Event{ToolDone{CallID: "call-3", Result: "x"}, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "x"}}} {
			if effs := s.Step(t0, ev); len(effs) != 0 {
				t.Fatalf("late %T: %v", ev, effTypes(effs))
			}
		}
	})
}

func TestSessionStartAfterCrash(t *testing.T) {
	t.Run("not idempotent: logged failed", func(t *testing.T) {
		s := machine(pendingHeader(), pendingState("search", 0), pendingEntries("search")...)
		effs := durable(s, t0, Start{})
		wantTypes(t, "start", effs, Append{}, RunStep{})
		e := appendedEntry(t, effs)
		if e.Seq != 3 || e.Role != engine.RoleTool || e.Content != engine.ResultInterrupted || machinetest.MetaString(e, "status") != engine.ToolFailed ||
			machinetest.MetaString(e, "call_id") != "call-2" || e.Metadata["reply_to"] != uint64(1) {
			t.Fatalf("failed entry = %+v", e)
		}
		if st := effs[1].(RunStep); st.UserSeq != 1 || s.st.Pending != nil || !slices.Equal(s.st.Steps, []uint64{3}) {
			t.Fatalf("step %+v state %+v", st, s.st)
		}
	})
	t.Run("idempotent: run once more", func(t *testing.T) {
		s := machine(pendingHeader(), pendingState("isearch", 0), pendingEntries("isearch")...)
		effs := durable(s, t0, Start{})
		wantTypes(t, "start", effs, Append{}, RunTool{})
		st, _ := decodeState(effs[0].(Append).Batch.Header.State)
		if len(effs[0].(Append).Batch.Entries) != 0 || st.Pending == nil || st.Pending.Attempts != 1 {
			t.Fatalf("the attempt must be durable before the run: %+v", st)
		}
		if call := effs[1].(RunTool).Call; call.CallID != "call-2" || call.Attempts != 1 || !s.busy {
			t.Fatalf("run = %+v", call)
		}
	})
	t.Run("idempotent, cut short again: failed", func(t *testing.T) {
		s := machine(pendingHeader(), pendingState("isearch", 1), pendingEntries("isearch")...)
		effs := durable(s, t0, Start{})
		wantTypes(t, "start", effs, Append{}, RunStep{})
		if e := appendedEntry(t, effs); machinetest.MetaString(e, "status") != engine.ToolFailed || e.Content != engine.ResultInterrupted {
			t.Fatalf("entry = %+v", e)
		}
	})
	t.Run("owed turns, nothing, terminal", func(t *testing.T) {
		h := baseHeader()
		h.LastSeq = 3
		effs := machine(h, state{Turns: []uint64{1, 3}}).Step(t0, Start{})
		wantTypes(t, "owed turns", effs, RunStep{})
		if effs[0].(RunStep).UserSeq != 1 {
			t.Fatalf("step = %+v", effs[0])
		}
		if effs := machine(baseHeader(), state{}).Step(t0, Start{}); len(effs) != 0 {
			t.Fatalf("nothing to do: %v", effTypes(effs))
		}
		for _, st := range []record.Status{record.StatusCompleted, record.StatusExpired} {
			h := pendingHeader()
			h.Status = st
			if effs := machine(h, pendingState("search", 0)).Step(t0, Start{}); len(effs) != 0 {
				t.Fatalf("%s session started work: %v", st, effTypes(effs))
			}
		}
	})
}

// One idempotent call through successive crashes, each boot starting from
// what the previous one made durable: the original run plus one re-run.
func TestSessionIdempotentToolNotRunThrice(t *testing.T) {
	h, st, runs := pendingHeader(), pendingState("isearch", 0), 1
	for boot := 1; boot <= 4; boot++ {
		s := machine(h, st, pendingEntries("isearch")...)
		effs := s.Step(t0, Start{})
		for _, ap := range only[Append](effs) {
			h = ap.Batch.Header
			st, _ = decodeState(h.State)
		}
		if len(only[RunTool](durable(s, t0, Appended{ID: s.nextID}))) == 0 {
			if st.Pending != nil {
				t.Fatalf("boot %d neither ran nor failed the call", boot)
			}
			break
		}
		runs++ // ... and the node crashes again during this run
	}
	if runs != 2 {
		t.Fatalf("an idempotent call ran %d times across crashes, want 2", runs)
	}
}

func TestSessionRecoverAt(t *testing.T) {
	boot := t0.Add(time.Hour)
	t.Run("active: the window starts at boot", func(t *testing.T) {
		s := machine(baseHeader(), state{})
		effs := s.Step(boot, Recover{Boot: boot, LastAlive: boot.Add(-time.Minute)})
		ap := one[Append](t, effs)
		h := s.Header()
		if h.Status != record.StatusInterrupted || !h.InterruptedAt.Equal(boot) || !h.ExpiresAt.Equal(boot.Add(testWindow)) ||
			!reflect.DeepEqual(ap.Batch.Header, h) {
			t.Fatalf("header = %+v", h)
		}
	})
	t.Run("interrupted, window ended before the stop: expired", func(t *testing.T) {
		for _, after := range []time.Duration{0, time.Second} {
			h := pendingHeader()
			s := machine(h, pendingState("search", 0))
			effs := s.Step(boot, Recover{Boot: boot, LastAlive: h.ExpiresAt.Add(after)})
			ap := one[Append](t, effs)
			if s.hdr.Status != record.StatusExpired || ap.Batch.Header.Status != record.StatusExpired || s.HasWork() {
				t.Fatalf("status %s", s.hdr.Status)
			}
			// The call in flight gets an outcome.
			if len(ap.Batch.Entries) != 1 || machinetest.MetaString(ap.Batch.Entries[0], "status") != engine.ToolFailed {
				t.Fatalf("entries %+v", ap.Batch.Entries)
			}
			if len(only[Ended](durable(s, boot, Appended{ID: ap.ID}))) != 1 {
				t.Fatal("the expiry is not reported to the registry")
			}
		}
	})
	t.Run("interrupted, window open at the stop: extended by the downtime", func(t *testing.T) {
		h := pendingHeader()
		lastAlive := h.ExpiresAt.Add(-2 * time.Minute)
		s := machine(h, pendingState("search", 0))
		one[Append](t, s.Step(boot, Recover{Boot: boot, LastAlive: lastAlive}))
		if want := h.ExpiresAt.Add(boot.Sub(lastAlive)); !s.hdr.ExpiresAt.Equal(want) || s.hdr.Status != record.StatusInterrupted || !s.HasWork() {
			t.Fatalf("expires %v status %s, want %v", s.hdr.ExpiresAt, s.hdr.Status, want)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		for _, st := range []record.Status{record.StatusCompleted, record.StatusExpired} {
			h := baseHeader()
			h.Status = st
			if effs := machine(h, state{}).Step(boot, Recover{Boot: boot, LastAlive: boot}); len(effs) != 0 {
				t.Fatalf("%s: %v", st, effTypes(effs))
			}
		}
	})
}

// TestSessionInstantEngine: an Instant engine's answer is stored in the
// same append as the message, and shown with it; no step runs.
func TestSessionInstantEngine(t *testing.T) {
	s, c := newAttached(t)
	s.cfg.Instant = engine.Echo{}.Answer
	effs := durable(s, t0, Send{Conn: c, ID: "m1", Content: "hi"})
	ap := one[Append](t, effs)
	if len(ap.Batch.Entries) != 2 || ap.Batch.Entries[1].Content != "Agent reply: hi" || ap.Batch.Entries[1].Metadata["reply_to"] != uint64(1) {
		t.Fatalf("append %+v", ap.Batch.Entries)
	}
	if len(only[RunStep](effs)) != 0 || s.busy || len(s.st.Turns) != 0 {
		t.Fatalf("a step ran: %v, state %+v", effTypes(effs), s.st)
	}
	if got := len(outs(effs)); got != 3 {
		t.Fatalf("%d deliveries, want ack and two messages", got)
	}
}
