package machine

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine/machinetest"

	"github.com/tether-dev/tether/wal/record"
)

// Durable before visible, in the machine: whatever follows a non-lazy
// append (deliveries, engine steps, tool runs, closes, stops) is held
// until the journal reports that append done, and the tail takes entries
// only then.

// pendingState is a session a crash left with call-2 of tool started for
// user entry 1.
func pendingState(tool string, attempts int) state {
	return state{Turns: []uint64{1}, Pending: &ToolCall{
		CallID: "call-2", Name: tool, Status: engine.ToolStarted, StartedSeq: 2, ReplyTo: 1, Attempts: attempts,
	}}
}

// pendingEntries are the entries of that session: the user's message and
// the started call.
func pendingEntries(tool string) []record.Entry {
	return []record.Entry{
		{Seq: 1, Role: engine.RoleUser, Content: "q", Metadata: map[string]any{"id": "m1"}},
		{Seq: 2, Role: engine.RoleTool, Metadata: map[string]any{"call_id": "call-2", "name": tool, "status": engine.ToolStarted, "reply_to": uint64(1)}},
	}
}

func pendingHeader() record.Header {
	h := baseHeader()
	h.Status, h.ExpiresAt, h.InterruptedAt, h.LastSeq = record.StatusInterrupted, t0.Add(testWindow), t0, 2
	return h
}

func TestDurableBeforeVisible(t *testing.T) {
	withSend := func(t *testing.T) (*Machine, Conn) {
		s, c := newAttached(t)
		durable(s, t0, Send{Conn: c, ID: "m1", Content: "q"})
		return s, c
	}
	withCall := func(t *testing.T) (*Machine, Conn) {
		s, c := withSend(t)
		durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search"}}})
		return s, c
	}
	attached := func(t *testing.T) (*Machine, Conn) { return newAttached(t) }
	crashed := func(tool string) func(*testing.T) (*Machine, Conn) {
		return func(*testing.T) (*Machine, Conn) {
			return machine(pendingHeader(), pendingState(tool, 0), pendingEntries(tool)...), nil
		}
	}
	cases := []struct {
		name    string
		setup   func(*testing.T) (*Machine, Conn)
		ev      func(*Machine, Conn) Event
		now     []Effect // before the append is durable, besides effAppend
		release []Effect // once it is
	}{
		{"send", attached, func(_ *Machine, c Conn) Event { return Send{Conn: c, ID: "m1", Content: "hi"} },
			nil, []Effect{Deliver{}, Deliver{}, RunStep{}}},
		{"context", attached, func(_ *Machine, c Conn) Event { return SetContext{Conn: c, Set: map[string]any{"a": "b"}} },
			nil, []Effect{Deliver{}}},
		{"reply", withSend, func(s *Machine, _ Conn) Event {
			return StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "r"}}
		},
			nil, []Effect{Deliver{}}},
		{"tool call", withSend, func(s *Machine, _ Conn) Event {
			return StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search"}}}
		},
			nil, []Effect{Deliver{}, RunTool{}}},
		{"tool done", withCall, func(*Machine, Conn) Event { return ToolDone{CallID: "call-2", Result: "x"} },
			nil, []Effect{Deliver{}, RunStep{}}},
		{"tool progress", withCall, func(*Machine, Conn) Event { return ToolProgress{CallID: "call-2", Partial: "1 of 3"} },
			nil, nil},
		{"complete", withCall, func(_ *Machine, c Conn) Event { return Complete{Conn: c} },
			[]Effect{CancelTurn{}}, []Effect{Deliver{}, Deliver{}, CloseConn{}, Ended{}, Stop{}}},
		{"start, tool not idempotent", crashed("search"), func(*Machine, Conn) Event { return Start{} },
			nil, []Effect{RunStep{}}},
		{"start, tool idempotent", crashed("isearch"), func(*Machine, Conn) Event { return Start{} },
			nil, []Effect{RunTool{}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, c := tc.setup(t)
			tailBefore, durableBefore := s.tail.last(), s.durableSeq()
			effs := s.Step(t0, tc.ev(s, c))
			ap := one[Append](t, effs)
			if ap.Lazy {
				t.Fatal("a visible change was appended lazily")
			}
			wantTypes(t, "before durable", slices.DeleteFunc(slices.Clone(effs), func(e Effect) bool {
				_, ok := e.(Append)
				return ok
			}), tc.now...)
			if s.tail.last() != tailBefore || s.durableSeq() != durableBefore {
				t.Fatalf("the tail moved to %d (durable %d) before the append was durable", s.tail.last(), s.durableSeq())
			}
			got := s.Step(t0, Appended{ID: ap.ID})
			wantTypes(t, "once durable", got, tc.release...)
			if n := len(ap.Batch.Entries); n > 0 {
				if last := ap.Batch.Entries[n-1].Seq; s.tail.last() != last || s.durableSeq() != last {
					t.Fatalf("durable entry %d: tail ends at %d, durable %d", last, s.tail.last(), s.durableSeq())
				}
			}
			if s.tail.last() != s.hdr.LastSeq || !s.Idle() && !s.busy {
				t.Fatalf("after the append: tail %d header %d", s.tail.last(), s.hdr.LastSeq)
			}
		})
	}
}

// A status change on attach or detach shows the client nothing a crash
// could lose, so it holds nothing back; a visible change after it waits
// only for its own append.
func TestLazyAppendsHoldNothing(t *testing.T) {
	s, c1 := exchanged(t)
	effs := s.Step(t0, Detach{Conn: c1})
	lazy1 := one[Append](t, effs)
	c2 := &tconn{"c2"}
	effs = s.Step(t0, Attach{Conn: c2, UserID: "alice", LastSeq: 2})
	wantTypes(t, "resume behind a lazy append", effs, Append{}, Deliver{}, Replay{}, Answer{})
	lazy2 := effs[0].(Append)
	if !lazy1.Lazy || !lazy2.Lazy {
		t.Fatal("attach/detach status changes must be lazy")
	}
	wantTypes(t, "history behind lazy appends", s.Step(t0, HistoryRequest{Conn: c2}), History{})

	effs = s.Step(t0, Send{Conn: c2, ID: "m2", Content: "x"})
	wantTypes(t, "send", effs, Append{})
	send := effs[0].(Append)
	if got := s.Step(t0, Appended{ID: lazy1.ID}); len(got) != 0 {
		t.Fatalf("completing a lazy append released %v", effTypes(got))
	}
	if got := s.Step(t0, Appended{ID: lazy2.ID}); len(got) != 0 {
		t.Fatalf("completing a lazy append released %v", effTypes(got))
	}
	wantTypes(t, "send durable", s.Step(t0, Appended{ID: send.ID}), Deliver{}, Deliver{}, RunStep{})
}

// A second send while the first append is in flight gets its own append
// at once; the acks come out in order as the appends complete.
func TestPipelinedSends(t *testing.T) {
	for _, cumulative := range []bool{false, true} {
		s, c := newAttached(t)
		e1 := s.Step(t0, Send{Conn: c, ID: "m1", Content: "one"})
		e2 := s.Step(t0, Send{Conn: c, ID: "m2", Content: "two"})
		wantTypes(t, "first send", e1, Append{})
		wantTypes(t, "second send, first in flight", e2, Append{})
		a1, a2 := e1[0].(Append), e2[0].(Append)
		if a1.ID+1 != a2.ID || a1.Batch.Entries[0].Seq != 1 || a2.Batch.Entries[0].Seq != 2 ||
			a1.Batch.Header.LastSeq != 1 || a2.Batch.Header.LastSeq != 2 ||
			!reflect.DeepEqual(a2.Batch.Sends, []record.Send{{ID: "m2", Seq: 2}}) {
			t.Fatalf("appends %+v / %+v", a1, a2)
		}
		var released []Effect
		if cumulative {
			// The journal reports the newest done; every older one is too.
			released = s.Step(t0, Appended{ID: a2.ID})
		} else {
			released = append(s.Step(t0, Appended{ID: a1.ID}), s.Step(t0, Appended{ID: a2.ID})...)
		}
		wantTypes(t, "released", released, Deliver{}, Deliver{}, RunStep{}, Deliver{}, Deliver{})
		got := outs(released)
		if *got[0].(*AckOut) != (AckOut{ID: "m1", Seq: 1}) || *got[2].(*AckOut) != (AckOut{ID: "m2", Seq: 2}) {
			t.Fatalf("acks out of order: %s", dumpOuts(got))
		}
		if st := released[2].(RunStep); st.UserSeq != 1 {
			t.Fatalf("step = %+v", st)
		}
		if s.tail.last() != 2 || !slices.Equal(s.st.Turns, []uint64{1, 2}) {
			t.Fatalf("tail %d turns %v", s.tail.last(), s.st.Turns)
		}
	}
}

// A failed append stops the machine: what waited for it is never shown,
// nor what waited for appends behind it.
func TestAppendFailureIsFailStop(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		s, c := newAttached(t)
		var first Append
		if lazy {
			first = one[Append](t, s.Step(t0, Detach{Conn: c}))
			c = &tconn{"c2"}
			s.Step(t0, Attach{Conn: c, UserID: "alice"})
		} else {
			first = one[Append](t, s.Step(t0, Send{Conn: c, ID: "m1", Content: "one"}))
		}
		second := one[Append](t, s.Step(t0, Send{Conn: c, ID: "m2", Content: "two"}))
		s.Step(t0, SetContext{Conn: c, Set: map[string]any{"k": "v"}})
		effs := s.Step(t0, Appended{ID: first.ID, Err: errors.New("disk on fire")})
		// The attached client is told and closed by the machine itself.
		wantTypes(t, "failed append", effs, Deliver{}, CloseConn{}, Fail{})
		if f := only[Fail](effs)[0]; f.Moved || !f.Interrupt {
			t.Fatalf("failed append: %+v", f)
		}
		if !s.failed || len(s.held) != 0 || s.tail.last() != 0 {
			t.Fatalf("after the failure: failed %v held %d tail %d", s.failed, len(s.held), s.tail.last())
		}
		for _, ev := range []Event{Appended{ID: second.ID}, Send{Conn: c, ID: "m3"}, Tick{}, Shutdown{}} {
			if got := s.Step(t0.Add(time.Hour), ev); len(got) != 0 {
				t.Fatalf("%T after a failure: %v", ev, effTypes(got))
			}
		}
	}
}

// Step handles every event without reporting it unknown. The list is read
// from the package source, so a new event without a case fails here (the
// runner's test does the same for effects).
func TestEveryEventAndEffectHandled(t *testing.T) {
	withCall := func() (*Machine, Conn) {
		s, c := newAttached(t)
		durable(s, t0, Send{Conn: c, ID: "m1", Content: "q"})
		durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search"}}})
		return s, c
	}
	events := map[string]func(*Machine, Conn) Event{
		"Start":          func(*Machine, Conn) Event { return Start{} },
		"Attach":         func(_ *Machine, c Conn) Event { return Attach{Conn: &tconn{"x"}, UserID: "alice"} },
		"Detach":         func(_ *Machine, c Conn) Event { return Detach{Conn: c} },
		"Send":           func(_ *Machine, c Conn) Event { return Send{Conn: c, ID: "m2", Content: "x"} },
		"SendChecked":    func(_ *Machine, c Conn) Event { return SendChecked{Send: Send{Conn: c, ID: "m3"}} },
		"SetContext":     func(_ *Machine, c Conn) Event { return SetContext{Conn: c, Set: map[string]any{"a": 1.0}} },
		"Complete":       func(_ *Machine, c Conn) Event { return Complete{Conn: c} },
		"HistoryRequest": func(_ *Machine, c Conn) Event { return HistoryRequest{Conn: c} },
		"StepDone": func(s *Machine, _ Conn) Event {
			return StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "r"}}
		},
		"ToolDone":     func(*Machine, Conn) Event { return ToolDone{CallID: "call-2", Result: "r"} },
		"ToolProgress": func(*Machine, Conn) Event { return ToolProgress{CallID: "call-2", Partial: "p"} },
		"Appended":     func(*Machine, Conn) Event { return Appended{ID: 99} },
		"Tick":         func(*Machine, Conn) Event { return Tick{} },
		"Shutdown":     func(*Machine, Conn) Event { return Shutdown{} },
		"Part":         func(s *Machine, _ Conn) Event { return Part{Step: s.step, Text: "p"} },
		"Flush":        func(*Machine, Conn) Event { return Flush{} },
		"Cancel":       func(_ *Machine, c Conn) Event { return Cancel{Conn: c} },
		"Approve":      func(_ *Machine, c Conn) Event { return Approve{Conn: c, CallID: "call-2", Approved: true} },
		"Query":        func(*Machine, Conn) Event { return Query{Reply: make(chan View, 1)} },
		"Recover":      func(*Machine, Conn) Event { return Recover{Boot: t0, LastAlive: t0} },
		"Rejoin":       func(s *Machine, c Conn) Event { return Rejoin{Conns: []Conn{c}, LastSeq: s.hdr.LastSeq} },
	}
	for name, ev := range events {
		s, c := withCall()
		if effs := durable(s, t0.Add(time.Hour), ev(s, c)); len(only[Fail](effs)) != 0 || s.failed {
			t.Errorf("%s: Step failed: %v", name, effs)
		}
	}

	src := machinetest.Parse(t, ".")
	evs := src.MethodTypes("isEvent")
	if len(evs) < len(events) || len(src.CaseTypes("Step")) < len(events) {
		t.Fatalf("the source scan found events %v", evs)
	}
	for _, name := range evs {
		_, tabled := events[name]
		switch {
		case !slices.Contains(src.CaseTypes("Step"), name):
			t.Errorf("Machine.Step has no case for %s", name)
		case !tabled:
			t.Errorf("%s is missing from this test's table", name)
		}
	}
}
