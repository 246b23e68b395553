package actor

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal"
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
func pendingEntries(tool string) []wal.Entry {
	return []wal.Entry{
		{Seq: 1, Role: engine.RoleUser, Content: "q", Metadata: map[string]any{"id": "m1"}},
		{Seq: 2, Role: engine.RoleTool, Metadata: map[string]any{"call_id": "call-2", "name": tool, "status": engine.ToolStarted, "reply_to": uint64(1)}},
	}
}

func pendingHeader() wal.Header {
	h := baseHeader()
	h.Status, h.ExpiresAt, h.InterruptedAt, h.LastSeq = wal.StatusInterrupted, t0.Add(testWindow), t0, 2
	return h
}

func TestDurableBeforeVisible(t *testing.T) {
	withSend := func(t *testing.T) (*Session, Conn) {
		s, c := newAttached(t)
		durable(s, t0, evSend{conn: c, id: "m1", content: "q"})
		return s, c
	}
	withCall := func(t *testing.T) (*Session, Conn) {
		s, c := withSend(t)
		durable(s, t0, evAction{step: s.step, userSeq: 1, action: engine.Action{Call: &engine.Call{Name: "search"}}})
		return s, c
	}
	attached := func(t *testing.T) (*Session, Conn) { return newAttached(t) }
	crashed := func(tool string) func(*testing.T) (*Session, Conn) {
		return func(*testing.T) (*Session, Conn) {
			return machine(pendingHeader(), pendingState(tool, 0), pendingEntries(tool)...), nil
		}
	}
	cases := []struct {
		name    string
		setup   func(*testing.T) (*Session, Conn)
		ev      func(*Session, Conn) Event
		now     []Effect // before the append is durable, besides effAppend
		release []Effect // once it is
	}{
		{"send", attached, func(_ *Session, c Conn) Event { return evSend{conn: c, id: "m1", content: "hi"} },
			nil, []Effect{effDeliver{}, effDeliver{}, effStep{}}},
		{"context", attached, func(_ *Session, c Conn) Event { return evContext{conn: c, set: map[string]any{"a": "b"}} },
			nil, []Effect{effDeliver{}}},
		{"reply", withSend, func(s *Session, _ Conn) Event {
			return evAction{step: s.step, userSeq: 1, action: engine.Action{Reply: "r"}}
		},
			nil, []Effect{effDeliver{}}},
		{"tool call", withSend, func(s *Session, _ Conn) Event {
			return evAction{step: s.step, userSeq: 1, action: engine.Action{Call: &engine.Call{Name: "search"}}}
		},
			nil, []Effect{effDeliver{}, effRunTool{}}},
		{"tool done", withCall, func(*Session, Conn) Event { return evToolDone{callID: "call-2", result: "x"} },
			nil, []Effect{effDeliver{}, effStep{}}},
		{"tool progress", withCall, func(*Session, Conn) Event { return evToolProgress{callID: "call-2", partial: "1 of 3"} },
			nil, nil},
		{"complete", withCall, func(_ *Session, c Conn) Event { return evComplete{conn: c} },
			[]Effect{effCancelTurn{}}, []Effect{effDeliver{}, effDeliver{}, effClose{}, effStatus{}, effStop{}}},
		{"start, tool not idempotent", crashed("search"), func(*Session, Conn) Event { return evStart{} },
			nil, []Effect{effStep{}}},
		{"start, tool idempotent", crashed("isearch"), func(*Session, Conn) Event { return evStart{} },
			nil, []Effect{effRunTool{}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, c := tc.setup(t)
			tailBefore, durableBefore := s.tail.last(), s.durableSeq()
			effs := s.Step(t0, tc.ev(s, c))
			ap := one[effAppend](t, effs)
			if ap.lazy {
				t.Fatal("a visible change was appended lazily")
			}
			wantTypes(t, "before durable", slices.DeleteFunc(slices.Clone(effs), func(e Effect) bool {
				_, ok := e.(effAppend)
				return ok
			}), tc.now...)
			if s.tail.last() != tailBefore || s.durableSeq() != durableBefore {
				t.Fatalf("the tail moved to %d (durable %d) before the append was durable", s.tail.last(), s.durableSeq())
			}
			got := s.Step(t0, evAppended{id: ap.id})
			wantTypes(t, "once durable", got, tc.release...)
			if n := len(ap.batch.Entries); n > 0 {
				if last := ap.batch.Entries[n-1].Seq; s.tail.last() != last || s.durableSeq() != last {
					t.Fatalf("durable entry %d: tail ends at %d, durable %d", last, s.tail.last(), s.durableSeq())
				}
			}
			if s.tail.last() != s.hdr.LastSeq || !s.idle() && !s.busy {
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
	effs := s.Step(t0, evDetach{conn: c1})
	lazy1 := one[effAppend](t, effs)
	c2 := &tconn{"c2"}
	effs = s.Step(t0, evAttach{conn: c2, userID: "alice", lastSeq: 2})
	wantTypes(t, "resume behind a lazy append", effs, effAppend{}, effDeliver{}, effReplay{}, effOpened{})
	lazy2 := effs[0].(effAppend)
	if !lazy1.lazy || !lazy2.lazy {
		t.Fatal("attach/detach status changes must be lazy")
	}
	wantTypes(t, "history behind lazy appends", s.Step(t0, evHistory{conn: c2}), effHistory{})

	effs = s.Step(t0, evSend{conn: c2, id: "m2", content: "x"})
	wantTypes(t, "send", effs, effAppend{})
	send := effs[0].(effAppend)
	if got := s.Step(t0, evAppended{id: lazy1.id}); len(got) != 0 {
		t.Fatalf("completing a lazy append released %v", effTypes(got))
	}
	if got := s.Step(t0, evAppended{id: lazy2.id}); len(got) != 0 {
		t.Fatalf("completing a lazy append released %v", effTypes(got))
	}
	wantTypes(t, "send durable", s.Step(t0, evAppended{id: send.id}), effDeliver{}, effDeliver{}, effStep{})
}

// A second send while the first append is in flight gets its own append
// at once; the acks come out in order as the appends complete.
func TestPipelinedSends(t *testing.T) {
	for _, cumulative := range []bool{false, true} {
		s, c := newAttached(t)
		e1 := s.Step(t0, evSend{conn: c, id: "m1", content: "one"})
		e2 := s.Step(t0, evSend{conn: c, id: "m2", content: "two"})
		wantTypes(t, "first send", e1, effAppend{})
		wantTypes(t, "second send, first in flight", e2, effAppend{})
		a1, a2 := e1[0].(effAppend), e2[0].(effAppend)
		if a1.id+1 != a2.id || a1.batch.Entries[0].Seq != 1 || a2.batch.Entries[0].Seq != 2 ||
			a1.batch.Header.LastSeq != 1 || a2.batch.Header.LastSeq != 2 ||
			!reflect.DeepEqual(a2.batch.Sends, []wal.Send{{ID: "m2", Seq: 2}}) {
			t.Fatalf("appends %+v / %+v", a1, a2)
		}
		var released []Effect
		if cumulative {
			// The journal reports the newest done; every older one is too.
			released = s.Step(t0, evAppended{id: a2.id})
		} else {
			released = append(s.Step(t0, evAppended{id: a1.id}), s.Step(t0, evAppended{id: a2.id})...)
		}
		wantTypes(t, "released", released, effDeliver{}, effDeliver{}, effStep{}, effDeliver{}, effDeliver{})
		got := outs(released)
		if *got[0].(*AckOut) != (AckOut{ID: "m1", Seq: 1}) || *got[2].(*AckOut) != (AckOut{ID: "m2", Seq: 2}) {
			t.Fatalf("acks out of order: %s", dumpOuts(got))
		}
		if st := released[2].(effStep); st.userSeq != 1 {
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
		var first effAppend
		if lazy {
			first = one[effAppend](t, s.Step(t0, evDetach{conn: c}))
			c = &tconn{"c2"}
			s.Step(t0, evAttach{conn: c, userID: "alice"})
		} else {
			first = one[effAppend](t, s.Step(t0, evSend{conn: c, id: "m1", content: "one"}))
		}
		second := one[effAppend](t, s.Step(t0, evSend{conn: c, id: "m2", content: "two"}))
		s.Step(t0, evContext{conn: c, set: map[string]any{"k": "v"}})
		effs := s.Step(t0, evAppended{id: first.id, err: errors.New("disk on fire")})
		wantTypes(t, "failed append", effs, effFail{})
		if !s.failed || len(s.held) != 0 || s.tail.last() != 0 {
			t.Fatalf("after the failure: failed %v held %d tail %d", s.failed, len(s.held), s.tail.last())
		}
		for _, ev := range []Event{evAppended{id: second.id}, evSend{conn: c, id: "m3"}, evTick{}, evShutdown{}} {
			if got := s.Step(t0.Add(time.Hour), ev); len(got) != 0 {
				t.Fatalf("%T after a failure: %v", ev, effTypes(got))
			}
		}
	}
}

// Step handles every event without reporting it unknown; and the actor
// knows every effect. The lists are read from the package source, so a new
// event or effect without a case fails here.
func TestEveryEventAndEffectHandled(t *testing.T) {
	withCall := func() (*Session, Conn) {
		s, c := newAttached(t)
		durable(s, t0, evSend{conn: c, id: "m1", content: "q"})
		durable(s, t0, evAction{step: s.step, userSeq: 1, action: engine.Action{Call: &engine.Call{Name: "search"}}})
		return s, c
	}
	events := map[string]func(*Session, Conn) Event{
		"evStart":       func(*Session, Conn) Event { return evStart{} },
		"evAttach":      func(_ *Session, c Conn) Event { return evAttach{conn: &tconn{"x"}, userID: "alice"} },
		"evDetach":      func(_ *Session, c Conn) Event { return evDetach{conn: c} },
		"evSend":        func(_ *Session, c Conn) Event { return evSend{conn: c, id: "m2", content: "x"} },
		"evSendChecked": func(_ *Session, c Conn) Event { return evSendChecked{send: evSend{conn: c, id: "m3"}} },
		"evContext":     func(_ *Session, c Conn) Event { return evContext{conn: c, set: map[string]any{"a": 1.0}} },
		"evComplete":    func(_ *Session, c Conn) Event { return evComplete{conn: c} },
		"evHistory":     func(_ *Session, c Conn) Event { return evHistory{conn: c} },
		"evAction": func(s *Session, _ Conn) Event {
			return evAction{step: s.step, userSeq: 1, action: engine.Action{Reply: "r"}}
		},
		"evToolDone":     func(*Session, Conn) Event { return evToolDone{callID: "call-2", result: "r"} },
		"evToolProgress": func(*Session, Conn) Event { return evToolProgress{callID: "call-2", partial: "p"} },
		"evAppended":     func(*Session, Conn) Event { return evAppended{id: 99} },
		"evTick":         func(*Session, Conn) Event { return evTick{} },
		"evShutdown":     func(*Session, Conn) Event { return evShutdown{} },
		"evPart":         func(s *Session, _ Conn) Event { return evPart{step: s.step, text: "p"} },
		"evFlush":        func(*Session, Conn) Event { return evFlush{} },
		"evCancel":       func(_ *Session, c Conn) Event { return evCancel{conn: c} },
		"evApprove":      func(_ *Session, c Conn) Event { return evApprove{conn: c, callID: "call-2", approved: true} },
	}
	for name, ev := range events {
		s, c := withCall()
		if effs := durable(s, t0.Add(time.Hour), ev(s, c)); len(only[effFail](effs)) != 0 || s.failed {
			t.Errorf("%s: Step failed: %v", name, effs)
		}
	}

	src := parsePackage(t)
	// evQuery is the actor's own: handle runs it between events and never
	// hands it to Step.
	evs, effs := src.methodTypes("isEvent"), src.methodTypes("isEffect")
	if len(evs) < len(events) || len(effs) < 13 || len(src.caseTypes("Step")) < len(events) {
		t.Fatalf("the source scan found events %v, effects %v", evs, effs)
	}
	for _, name := range evs {
		_, tabled := events[name]
		switch {
		case name == "evQuery":
			if !slices.Contains(src.caseTypes("handle"), name) {
				t.Errorf("actor.handle does not intercept %s", name)
			}
		case !slices.Contains(src.caseTypes("Step"), name):
			t.Errorf("Session.Step has no case for %s", name)
		case !tabled:
			t.Errorf("%s is missing from this test's table", name)
		}
	}
	for _, name := range effs {
		if !slices.Contains(src.caseTypes("run"), name) {
			t.Errorf("actor.run has no case for %s", name)
		}
	}
}

type pkgSource struct{ files []*ast.File }

func parsePackage(t *testing.T) pkgSource {
	t.Helper()
	fset := token.NewFileSet()
	des, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var src pkgSource
	for _, de := range des {
		if n := de.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, n, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			src.files = append(src.files, f)
		}
	}
	if len(src.files) == 0 {
		t.Fatal("no package source found")
	}
	return src
}

// methodTypes names the receiver types of every method called name.
func (p pkgSource) methodTypes(name string) []string {
	var out []string
	for _, f := range p.files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == name && fd.Recv != nil {
				if id, ok := fd.Recv.List[0].Type.(*ast.Ident); ok {
					out = append(out, id.Name)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// caseTypes names the types of every type switch case in function fn.
func (p pkgSource) caseTypes(fn string) []string {
	var out []string
	for _, f := range p.files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != fn || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if cc, ok := n.(*ast.CaseClause); ok {
					for _, e := range cc.List {
						if id, ok := e.(*ast.Ident); ok {
							out = append(out, id.Name)
						}
					}
				}
				return true
			})
		}
	}
	return out
}
