package actor

import (
	"testing"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal"
)

// appendedEntries are the entries effs append, in order.
func appendedEntries(effs []Effect) []wal.Entry {
	var es []wal.Entry
	for _, ap := range only[effAppend](effs) {
		es = append(es, ap.batch.Entries...)
	}
	return es
}

// Cancel mid-stream: the text so far is the turn's agent entry, marked
// cancelled, at the seq the deltas named; the step is abandoned and what
// it says later is ignored; the next turn runs.
func TestSessionCancelStreamed(t *testing.T) {
	s, c := streaming(t, 0)
	s.Step(t0, evPart{step: s.step, text: "half "})
	durable(s, t0, evSend{conn: c, id: "m2", content: "queued"})
	// The send split the reply: "half " is entry 2, the queued send is 3.
	s.Step(t0, evPart{step: s.step, text: "more "})
	old := s.step
	effs := durable(s, t0, evCancel{conn: c})
	if len(only[effCancelTurn](effs)) != 1 {
		t.Fatalf("cancel did not abandon the step: %v", effTypes(effs))
	}
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Role != engine.RoleAgent || es[0].Content != "more " || es[0].Seq != 4 ||
		es[0].Metadata["cancelled"] != true || asUint(es[0].Metadata["reply_to"]) != 1 {
		t.Fatalf("cancel logged %+v", es)
	}
	// The queued turn runs next; the old step's late words change nothing.
	if st := one[effStep](t, effs); st.userSeq != 3 || !s.busy || s.st.Turns[0] != 3 {
		t.Fatalf("next turn: %+v, turns %v", st, s.st.Turns)
	}
	for _, ev := range []Event{evPart{step: old, text: "late"}, evAction{step: old, userSeq: 1, action: engine.Action{Reply: "late"}}} {
		if effs := s.Step(t0, ev); len(effs) != 0 {
			t.Fatalf("%T of the cancelled step: %v", ev, effTypes(effs))
		}
	}
	// A second cancel for the ended turn does nothing.
	if effs := s.Step(t0, evCancel{conn: c, replyTo: 1}); len(effs) != 0 {
		t.Fatalf("late cancel: %v", effTypes(effs))
	}
}

// Cancel before any text, and cancel with nothing running.
func TestSessionCancelNothingShown(t *testing.T) {
	s, c := streaming(t, 0)
	effs := durable(s, t0, evCancel{conn: c, replyTo: 1})
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Role != engine.RoleSystem || es[0].Content != Cancelled ||
		es[0].Metadata["cancelled"] != true || asUint(es[0].Metadata["reply_to"]) != 1 {
		t.Fatalf("cancel logged %+v", es)
	}
	if s.busy || len(s.st.Turns) != 0 || !s.idle() {
		t.Fatalf("after cancel: busy %v turns %v", s.busy, s.st.Turns)
	}
	if effs := s.Step(t0, evCancel{conn: c}); len(effs) != 0 {
		t.Fatalf("cancel with no turn: %v", effTypes(effs))
	}
	if effs := s.Step(t0, evCancel{conn: &tconn{"stranger"}}); len(effs) != 0 {
		t.Fatalf("cancel from a connection not attached: %v", effTypes(effs))
	}
}

// Cancel during a tool call: the call is logged failed "cancelled", then
// the turn's system entry.
func TestSessionCancelTool(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, evSend{conn: c, id: "m1", content: "q"})
	effs := durable(s, t0, evAction{step: s.step, userSeq: 1, action: engine.Action{Call: &engine.Call{Name: "search"}}})
	call := one[effRunTool](t, effs).call
	effs = durable(s, t0, evCancel{conn: c})
	es := appendedEntries(effs)
	if len(es) != 2 || es[0].Metadata["status"] != engine.ToolFailed || es[0].Content != Cancelled ||
		es[0].Metadata["call_id"] != call.CallID || es[1].Role != engine.RoleSystem || es[1].Metadata["cancelled"] != true {
		t.Fatalf("cancel logged %+v", es)
	}
	// The tool's late result is not logged.
	if effs := s.Step(t0, evToolDone{callID: call.CallID, result: "late"}); len(effs) != 0 {
		t.Fatalf("late tool result: %v", effTypes(effs))
	}
}

// A cancel naming a queued turn drops it; the running one goes on.
func TestSessionCancelQueued(t *testing.T) {
	s, c := streaming(t, 0)
	durable(s, t0, evSend{conn: c, id: "m2", content: "two"})
	step := s.step
	effs := durable(s, t0, evCancel{conn: c, replyTo: 2})
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Role != engine.RoleSystem || asUint(es[0].Metadata["reply_to"]) != 2 || len(only[effCancelTurn](effs)) != 0 {
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
	s.Step(t0, evPart{step: s.step, text: "long "})
	effs := durable(s, t0, evSend{conn: c, id: "m2", content: "stop, do this", interrupt: true})
	es := appendedEntries(effs)
	if len(es) != 2 || es[0].Content != "long " || es[0].Metadata["cancelled"] != true || es[1].Role != engine.RoleUser {
		t.Fatalf("interrupt logged %+v", es)
	}
	if st := one[effStep](t, effs); st.userSeq != es[1].Seq || len(s.st.Turns) != 1 {
		t.Fatalf("the interrupting send's turn: %+v turns %v", st, s.st.Turns)
	}
	// A resent interrupt (same id) is only acked again.
	effs = durable(s, t0, evSend{conn: c, id: "m2", content: "stop, do this", interrupt: true})
	if len(only[effCancelTurn](effs)) != 0 || len(appendedEntries(effs)) != 0 {
		t.Fatalf("a resent interrupt cancelled again: %v", effTypes(effs))
	}
}

// Approval in the machine: the call waits, the session is idle (it may
// passivate), a restart keeps it waiting, the first decision stands, a
// call that never waited is a bad request.
func TestSessionApproval(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, evSend{conn: c, id: "m1", content: "book it"})
	effs := durable(s, t0, evAction{step: s.step, userSeq: 1, action: engine.Action{Call: &engine.Call{Name: "booking", Approval: true, Args: map[string]any{"what": "room"}}}})
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Metadata["status"] != engine.ToolAwaitingApproval || es[0].Metadata["args"] == nil || len(only[effRunTool](effs)) != 0 {
		t.Fatalf("awaiting: %+v %v", es, effTypes(effs))
	}
	callID := es[0].Metadata["call_id"].(string)
	if !s.idle() || s.sessionOut(ReasonResumed).Pending.Status != engine.ToolAwaitingApproval {
		t.Fatalf("a waiting call: idle %v pending %+v", s.idle(), s.st.Pending)
	}
	// After a restart the turn still waits: nothing runs.
	r := machine(s.hdr, s.st, es...)
	if effs := r.Step(t0, evStart{}); len(effs) != 0 || !r.busy || !r.idle() {
		t.Fatalf("restart of a waiting call: %v", effTypes(effs))
	}
	rc := &tconn{"c2"}
	r.Step(t0, evAttach{conn: rc, userID: "alice"})
	if effs := r.Step(t0, evApprove{conn: rc, callID: "call-99", approved: true}); len(outs(effs)) != 1 || outs(effs)[0].(*ErrorOut).Code != CodeBadRequest {
		t.Fatalf("unknown call: %v", effTypes(effs))
	}
	effs = durable(r, t0, evApprove{conn: rc, callID: callID, approved: true})
	es = appendedEntries(effs)
	if len(es) != 2 || es[0].Metadata["status"] != engine.ToolApproved || es[0].Metadata["by"] != "alice" ||
		es[1].Metadata["status"] != engine.ToolStarted || one[effRunTool](t, effs).call.CallID != callID {
		t.Fatalf("approved: %+v %v", es, effTypes(effs))
	}
	for _, approved := range []bool{false, true} {
		if effs := r.Step(t0, evApprove{conn: rc, callID: callID, approved: approved}); len(effs) != 0 {
			t.Fatalf("a second decision: %v", effTypes(effs))
		}
	}
	durable(r, t0, evToolDone{callID: callID, result: "booked"})
	if effs := r.Step(t0, evApprove{conn: rc, callID: callID, approved: false}); len(effs) != 0 {
		t.Fatalf("a decision after the call ended: %v", effTypes(effs))
	}
}

// A denied call never runs and the next step is asked for at once.
func TestSessionApprovalDenied(t *testing.T) {
	s, c := newAttached(t)
	durable(s, t0, evSend{conn: c, id: "m1", content: "book it"})
	durable(s, t0, evAction{step: s.step, userSeq: 1, action: engine.Action{Call: &engine.Call{Name: "booking", Approval: true, Sensitive: true}}})
	effs := durable(s, t0, evApprove{conn: c, callID: s.st.Pending.CallID})
	es := appendedEntries(effs)
	if len(es) != 1 || es[0].Metadata["status"] != engine.ToolDenied || len(only[effRunTool](effs)) != 0 ||
		len(only[effStep](effs)) != 1 || s.st.Pending != nil || s.hdr.Sensitive {
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
	effs := s.Step(t0, evAttach{conn: c2, userID: "alice", lastSeq: 2, shared: true})
	if len(only[effClose](effs)) != 0 || len(s.conns) != 2 {
		t.Fatalf("shared attach: %v conns %v", effTypes(effs), s.conns)
	}
	if d := only[effDeliver](effs); len(d) != 1 || d[0].conn != c2 {
		t.Fatalf("the session frame went to %v", d)
	}
	effs = durable(s, t0, evSend{conn: c2, id: "m2", content: "from two"})
	for _, d := range only[effDeliver](effs) {
		if _, ack := d.out.(*AckOut); ack && d.conn != c2 {
			t.Fatalf("the ack went to %v", d.conn)
		}
	}
	if n := len(only[effDeliver](effs)); n != 3 { // ack to c2, the entry to both
		t.Fatalf("deliveries %d: %v", n, effs)
	}
	if res := one[effOpened](t, s.Step(t0, evAttach{conn: &tconn{"c3"}, userID: "alice", shared: true})).res; res.err != ErrTooManyConns {
		t.Fatalf("a third conn with MaxConns 2: %+v", res)
	}
	durable(s, t0, evDetach{conn: c1})
	if s.hdr.Status != wal.StatusActive || len(s.conns) != 1 {
		t.Fatalf("one of two detached: %s conns %v", s.hdr.Status, s.conns)
	}
	c4 := &tconn{"c4"}
	effs = s.Step(t0, evAttach{conn: c4, userID: "alice"})
	if cl := only[effClose](effs); len(cl) != 1 || cl[0].conn != c2 || cl[0].why != CloseSuperseded {
		t.Fatalf("plain attach closed %v", cl)
	}
}

// A connection attaching shared during a reply gets the parts the others
// were sent; parts waiting for a flush go to all of them together.
func TestSessionSharedCatchUp(t *testing.T) {
	s, c1 := streaming(t, 1)
	s.Step(t0, evPart{step: s.step, text: "a "}) // sent, flush due
	s.Step(t0, evPart{step: s.step, text: "b "}) // waits for the flush
	c2 := &tconn{"c2"}
	effs := s.Step(t0, evAttach{conn: c2, userID: "alice", shared: true})
	ds := deltasOf(effs)
	if len(ds) != 1 || ds[0].Text != "a " || ds[0].Part != 0 {
		t.Fatalf("catch-up %+v", ds)
	}
	effs = s.Step(t0, evFlush{})
	var to []Conn
	for _, d := range only[effDeliver](effs) {
		if dd, ok := d.out.(*DeltaOut); ok && dd.Text == "b " && dd.From == 1 {
			to = append(to, d.conn)
		}
	}
	if len(to) != 2 || to[0] != c1 || to[1] != c2 {
		t.Fatalf("the flushed part went to %v", to)
	}
}
