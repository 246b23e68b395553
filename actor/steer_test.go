package actor

import (
	"strings"
	"testing"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/actor/machine/machinetest"
)

// A tool call that needs approval waits in the log: through a disconnect,
// a passivation and a restart nothing runs, the snapshot shows it
// waiting; an approve from a new connection runs it once; a second
// decision does nothing.
func TestApprovalSurvivesRestart(t *testing.T) {
	eng := newCallEngine()
	e := newEnv(t, func(c *Config) { c.Engine = eng })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	if err := h.Send(t.Context(), "q", "approve a transfer", nil); err != nil {
		t.Fatal(err)
	}
	expect[*machine.AckOut](t, c)
	expect[*machine.EntryOut](t, c)
	waiting := expect[*machine.EntryOut](t, c).Entry
	if machinetest.MetaString(waiting, "status") != engine.ToolAwaitingApproval || waiting.Metadata["args"] == nil {
		t.Fatalf("waiting entry %+v", waiting)
	}
	callID := machinetest.MetaString(waiting, "call_id")
	h.Detach()
	e.passivate("s")
	e.restart()
	e.settle("s")
	if p := e.snapshot("s", "alice").Pending; p == nil || p.Status != engine.ToolAwaitingApproval || p.CallID != callID {
		t.Fatalf("snapshot pending %+v", p)
	}
	if n := eng.g.runs.Load(); n != 0 {
		t.Fatalf("the call ran %d times before its approval", n)
	}
	c2 := newRecConn("c2")
	h2, so, _ := e.resume("s", "alice", waiting.Seq, c2)
	if so.Pending == nil || so.Pending.Status != engine.ToolAwaitingApproval {
		t.Fatalf("session frame pending %+v", so.Pending)
	}
	if err := h2.Approve(t.Context(), "call-404", true); err != nil {
		t.Fatal(err)
	}
	if er := expect[*machine.ErrorOut](t, c2); er.Code != machine.CodeBadRequest {
		t.Fatalf("unknown call: %+v", er)
	}
	if err := h2.Approve(t.Context(), callID, true); err != nil {
		t.Fatal(err)
	}
	approved := expect[*machine.EntryOut](t, c2).Entry
	started := expect[*machine.EntryOut](t, c2).Entry
	if machinetest.MetaString(approved, "status") != engine.ToolApproved || machinetest.MetaString(approved, "by") != "alice" || machinetest.MetaString(started, "status") != engine.ToolStarted {
		t.Fatalf("after approve: %+v / %+v", approved, started)
	}
	actortest.Recv(t, "the approved run", eng.g.started)
	if err := h2.Approve(t.Context(), callID, false); err != nil {
		t.Fatal(err)
	}
	eng.g.results <- "sent"
	done := expect[*machine.EntryOut](t, c2).Entry
	reply := expect[*machine.EntryOut](t, c2).Entry
	if machinetest.MetaString(done, "status") != engine.ToolCompleted || reply.Role != engine.RoleAgent || !strings.Contains(reply.Content, "sent") {
		t.Fatalf("after the run: %+v / %+v", done, reply)
	}
	if n := eng.g.runs.Load(); n != 1 || len(eng.callsSeen()) != 1 {
		t.Fatalf("the approved call ran %d times", n)
	}
}

// A denied call never runs; the engine answers knowing it was denied; a
// tool declared Approval (as MCP's destructive tools are) does not mark
// the session sensitive by a run that did not happen.
func TestApprovalDenied(t *testing.T) {
	eng := newGatedEngine(false)
	eng.approvePay = true
	e := newEnv(t, func(c *Config) { c.Engine = eng })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	if err := h.Send(t.Context(), "q", "pay the rent", nil); err != nil {
		t.Fatal(err)
	}
	expect[*machine.AckOut](t, c)
	expect[*machine.EntryOut](t, c)
	waiting := expect[*machine.EntryOut](t, c).Entry
	if err := h.Approve(t.Context(), machinetest.MetaString(waiting, "call_id"), false); err != nil {
		t.Fatal(err)
	}
	denied := expect[*machine.EntryOut](t, c).Entry
	reply := expect[*machine.EntryOut](t, c).Entry
	if machinetest.MetaString(denied, "status") != engine.ToolDenied || reply.Role != engine.RoleAgent || !strings.Contains(reply.Content, "denied") {
		t.Fatalf("denied: %+v / %+v", denied, reply)
	}
	if n := eng.g.runs.Load(); n != 0 || e.header("s").Sensitive {
		t.Fatalf("a denied payment ran %d times (sensitive %v)", n, e.header("s").Sensitive)
	}
}

// Cancel during a tool run: the tool's context is cancelled, the call is
// logged failed "cancelled", and the next send is answered normally.
func TestCancelDuringTool(t *testing.T) {
	eng := newGatedEngine(false)
	e := newEnv(t, func(c *Config) { c.Engine = eng })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	started := sendToTool(t, h, c, eng.g, "q", "search something")
	if err := h.Cancel(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	failed := expect[*machine.EntryOut](t, c).Entry
	note := expect[*machine.EntryOut](t, c).Entry
	if machinetest.MetaString(failed, "status") != engine.ToolFailed || failed.Content != engine.ResultCancelled || machinetest.MetaString(failed, "call_id") != machinetest.MetaString(started, "call_id") ||
		note.Role != engine.RoleSystem || note.Metadata["cancelled"] != true {
		t.Fatalf("cancel logged %+v / %+v", failed, note)
	}
	actortest.Eventually(t, "the tool's context cancelled", func() bool { return eng.g.cancelled.Load() == 1 })
	sendToTool(t, h, c, eng.g, "q2", "search again")
	eng.g.results <- "found"
	expect[*machine.EntryOut](t, c)
	if reply := expect[*machine.EntryOut](t, c).Entry; reply.Role != engine.RoleAgent || !strings.Contains(reply.Content, "found") {
		t.Fatalf("the next turn: %+v", reply)
	}
}
