package machine

import (
	"testing"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine/machinetest"

	"github.com/tether-dev/tether/wal/record"
)

// appendedEntries are the entries effs append, in order.
func appendedEntries(effs []Effect) []record.Entry {
	var es []record.Entry
	for _, ap := range only[Append](effs) {
		es = append(es, ap.Batch.Entries...)
	}
	return es
}

// Cancel mid-stream: the text so far is the turn's agent entry, marked
// cancelled, at the seq the deltas named; the step is abandoned and what
// it says later is ignored; the next turn runs.
func TestSessionCancelStreamed(t *testing.T) {
	s, c := streaming(t, 0)
	s.Step(t0, Part{Step: s.step, Text: "half "})
	durable(s, t0, Send{Conn: c, ID: "m2", Content: "queued"})
	// The send split the reply: "half " is entry 2, the queued send is 3.
	s.Step(t0, Part{Step: s.step, Text: "more "})
	old := s.step
	effs := durable(s, t0, Cancel{Conn: c})
	if len(only[CancelTurn](effs)) != 1 {
		t.Fatalf("cancel did not abandon the step: %v", effTypes(effs))
	}
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Role != engine.RoleAgent || es[0].Content != "more " || es[0].Seq != 4 ||
		es[0].Metadata["cancelled"] != true || machinetest.Uint(es[0].Metadata["reply_to"]) != 1 {
		t.Fatalf("cancel logged %+v", es)
	}
	// The queued turn runs next; the old step's late words change nothing.
	if st := one[RunStep](t, effs); st.UserSeq != 3 || !s.busy || s.st.Turns[0] != 3 {
		t.Fatalf("next turn: %+v, turns %v", st, s.st.Turns)
	}
	for _, ev := range []Event{Part{Step: old, Text: "late"}, StepDone{Step: old, UserSeq: 1, Action: engine.Action{Reply: "late"}}} {
		if effs := s.Step(t0, ev); len(effs) != 0 {
			t.Fatalf("%T of the cancelled step: %v", ev, effTypes(effs))
		}
	}
	// A second cancel for the ended turn does nothing.
	if effs := s.Step(t0, Cancel{Conn: c, ReplyTo: 1}); len(effs) != 0 {
		t.Fatalf("late cancel: %v", effTypes(effs))
	}
}

// Cancel before any text, and cancel with nothing running.
func TestSessionCancelNothingShown(t *testing.T) {
	s, c := streaming(t, 0)
	effs := durable(s, t0, Cancel{Conn: c, ReplyTo: 1})
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Role != engine.RoleSystem || es[0].Content != engine.ResultCancelled ||
		es[0].Metadata["cancelled"] != true || machinetest.Uint(es[0].Metadata["reply_to"]) != 1 {
		t.Fatalf("cancel logged %+v", es)
	}
	if s.busy || len(s.st.Turns) != 0 || !s.Idle() {
		t.Fatalf("after cancel: busy %v turns %v", s.busy, s.st.Turns)
	}
	if effs := s.Step(t0, Cancel{Conn: c}); len(effs) != 0 {
		t.Fatalf("cancel with no turn: %v", effTypes(effs))
	}
	if effs := s.Step(t0, Cancel{Conn: &tconn{"stranger"}}); len(effs) != 0 {
		t.Fatalf("cancel from a connection not attached: %v", effTypes(effs))
	}
}

// Cancel during a tool call: the call is logged failed "cancelled", then
// the turn's system entry.
func TestSessionCancelTool(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "q"})
	effs := durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search"}}})
	call := one[RunTool](t, effs).Call
	effs = durable(s, t0, Cancel{Conn: c})
	es := appendedEntries(effs)
	if len(es) != 2 || es[0].Metadata["status"] != engine.ToolFailed || es[0].Content != engine.ResultCancelled ||
		es[0].Metadata["call_id"] != call.CallID || es[1].Role != engine.RoleSystem || es[1].Metadata["cancelled"] != true {
		t.Fatalf("cancel logged %+v", es)
	}
	// The tool's late result is not logged.
	if effs := s.Step(t0, ToolDone{CallID: call.CallID, Result: "late"}); len(effs) != 0 {
		t.Fatalf("late tool result: %v", effTypes(effs))
	}
}

// A cancel naming a queued turn drops it; the running one goes on.
func TestSessionCancelQueued(t *testing.T) {
	s, c := streaming(t, 0)
	durable(s, t0, Send{Conn: c, ID: "m2", Content: "two"})
	step := s.step
	effs := durable(s, t0, Cancel{Conn: c, ReplyTo: 2})
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Role != engine.RoleSystem || machinetest.Uint(es[0].Metadata["reply_to"]) != 2 || len(only[CancelTurn](effs)) != 0 {
		t.Fatalf("cancel of a queued turn: %+v %v", es, effTypes(effs))
	}
	if s.step != step || len(s.st.Turns) != 1 || s.st.Turns[0] != 1 {
		t.Fatalf("the running turn changed: step %d→%d turns %v", step, s.step, s.st.Turns)
	}
}

// A send with interrupt cancels the running turn, then is queued and
// answered at once.
func TestSessionInterrupt(t *testing.T) {
	s, c := streaming(t, 0)
	s.Step(t0, Part{Step: s.step, Text: "long "})
	effs := durable(s, t0, Send{Conn: c, ID: "m2", Content: "stop, do this", Interrupt: true})
	es := appendedEntries(effs)
	if len(es) != 2 || es[0].Content != "long " || es[0].Metadata["cancelled"] != true || es[1].Role != engine.RoleUser {
		t.Fatalf("interrupt logged %+v", es)
	}
	if st := one[RunStep](t, effs); st.UserSeq != es[1].Seq || len(s.st.Turns) != 1 {
		t.Fatalf("the interrupting send's turn: %+v turns %v", st, s.st.Turns)
	}
	// A resent interrupt (same id) is only acked again.
	effs = durable(s, t0, Send{Conn: c, ID: "m2", Content: "stop, do this", Interrupt: true})
	if len(only[CancelTurn](effs)) != 0 || len(appendedEntries(effs)) != 0 {
		t.Fatalf("a resent interrupt cancelled again: %v", effTypes(effs))
	}
}

// Approval in the machine: the call waits, the session is idle (it may
// passivate), a restart keeps it waiting, the first decision stands, a
// call that never waited is a bad request.
func TestSessionApproval(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "book it"})
	effs := durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "booking", Approval: true, Args: map[string]any{"what": "room"}}}})
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Metadata["status"] != engine.ToolAwaitingApproval || es[0].Metadata["args"] == nil || len(only[RunTool](effs)) != 0 {
		t.Fatalf("awaiting: %+v %v", es, effTypes(effs))
	}
	callID := es[0].Metadata["call_id"].(string)
	if !s.Idle() || s.sessionOut(ReasonResumed).Pending.Status != engine.ToolAwaitingApproval {
		t.Fatalf("a waiting call: idle %v pending %+v", s.Idle(), s.st.Pending)
	}
	// After a restart the turn still waits: nothing runs.
	r := machine(s.hdr, s.st, es...)
	if effs := r.Step(t0, Start{}); len(effs) != 0 || !r.busy || !r.Idle() {
		t.Fatalf("restart of a waiting call: %v", effTypes(effs))
	}
	rc := &tconn{"c2"}
	r.Step(t0, Attach{Conn: rc, UserID: "alice"})
	if effs := r.Step(t0, Approve{Conn: rc, CallID: "call-99", Approved: true}); len(outs(effs)) != 1 || outs(effs)[0].(*ErrorOut).Code != CodeBadRequest {
		t.Fatalf("unknown call: %v", effTypes(effs))
	}
	effs = durable(r, t0, Approve{Conn: rc, CallID: callID, Approved: true})
	es = appendedEntries(effs)
	if len(es) != 2 || es[0].Metadata["status"] != engine.ToolApproved || es[0].Metadata["by"] != "alice" ||
		es[1].Metadata["status"] != engine.ToolStarted || one[RunTool](t, effs).Call.CallID != callID {
		t.Fatalf("approved: %+v %v", es, effTypes(effs))
	}
	for _, approved := range []bool{false, true} {
		if effs := r.Step(t0, Approve{Conn: rc, CallID: callID, Approved: approved}); len(effs) != 0 {
			t.Fatalf("a second decision: %v", effTypes(effs))
		}
	}
	durable(r, t0, ToolDone{CallID: callID, Result: "booked"})
	if effs := r.Step(t0, Approve{Conn: rc, CallID: callID, Approved: false}); len(effs) != 0 {
		t.Fatalf("a decision after the call ended: %v", effTypes(effs))
	}
}

// A denied call never runs and the next step is asked for at once.
func TestSessionApprovalDenied(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "book it"})
	durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "booking", Approval: true, Sensitive: true}}})
	effs := durable(s, t0, Approve{Conn: c, CallID: s.st.Pending.CallID})
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Metadata["status"] != engine.ToolDenied || len(only[RunTool](effs)) != 0 ||
		len(only[RunStep](effs)) != 1 || s.st.Pending != nil || s.hdr.Sensitive {
		t.Fatalf("denied: %+v %v", es, effTypes(effs))
	}
	if len(s.st.Steps) != 2 {
		t.Fatalf("the next step sees steps %v, want the awaiting and denied entries", s.st.Steps)
	}
}

// Shared attach: both connections get entries, the ack goes to its
// sender; one more than MaxConns is refused; a plain attach supersedes
// all of them; detaching one keeps the session active.
func TestSessionSharedAttach(t *testing.T) {
	s, c1 := exchanged(t)
	c2 := &tconn{"c2"}
	effs := s.Step(t0, Attach{Conn: c2, UserID: "alice", LastSeq: 2, Shared: true})
	if len(only[CloseConn](effs)) != 0 || len(s.conns) != 2 {
		t.Fatalf("shared attach: %v conns %v", effTypes(effs), s.conns)
	}
	if d := only[Deliver](effs); len(d) != 1 || d[0].Conn != c2 {
		t.Fatalf("the session frame went to %v", d)
	}
	effs = durable(s, t0, Send{Conn: c2, ID: "m2", Content: "from two"})
	for _, d := range only[Deliver](effs) {
		if _, ack := d.Out.(*AckOut); ack && d.Conn != c2 {
			t.Fatalf("the ack went to %v", d.Conn)
		}
	}
	if n := len(only[Deliver](effs)); n != 3 { // ack to c2, the entry to both
		t.Fatalf("deliveries %d: %v", n, effs)
	}
	if res := one[Answer](t, s.Step(t0, Attach{Conn: &tconn{"c3"}, UserID: "alice", Shared: true})).Result; res.Err != ErrTooManyConns {
		t.Fatalf("a third conn with MaxConns 2: %+v", res)
	}
	durable(s, t0, Detach{Conn: c1})
	if s.hdr.Status != record.StatusActive || len(s.conns) != 1 {
		t.Fatalf("one of two detached: %s conns %v", s.hdr.Status, s.conns)
	}
	c4 := &tconn{"c4"}
	effs = s.Step(t0, Attach{Conn: c4, UserID: "alice"})
	if cl := only[CloseConn](effs); len(cl) != 1 || cl[0].Conn != c2 || cl[0].Why != CloseSuperseded {
		t.Fatalf("plain attach closed %v", cl)
	}
}

// A connection attaching shared during a reply gets the parts the others
// were sent; parts waiting for a flush go to all of them together.
func TestSessionSharedCatchUp(t *testing.T) {
	s, c1 := streaming(t, 1)
	s.Step(t0, Part{Step: s.step, Text: "a "}) // sent, flush due
	s.Step(t0, Part{Step: s.step, Text: "b "}) // waits for the flush
	c2 := &tconn{"c2"}
	effs := s.Step(t0, Attach{Conn: c2, UserID: "alice", Shared: true})
	ds := deltasOf(effs)
	if len(ds) != 1 || ds[0].Text != "a " || ds[0].Part != 0 {
		t.Fatalf("catch-up %+v", ds)
	}
	effs = s.Step(t0, Flush{})
	var to []Conn
	for _, d := range only[Deliver](effs) {
		if dd, ok := d.Out.(*DeltaOut); ok && dd.Text == "b " && dd.From == 1 {
			to = append(to, d.Conn)
		}
	}
	if len(to) != 2 || to[0] != c1 || to[1] != c2 {
		t.Fatalf("the flushed part went to %v", to)
	}
}
