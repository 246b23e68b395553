package actor

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/actor/machine/machinetest"

	"github.com/tether-dev/tether/wal"
)

// Turns with tools the test controls: a tool run ends only when the test
// says, so no test waits on a delay.

// sendToTool sends text and waits for the ack, the user entry, the started
// tool entry and the run itself.
func sendToTool(t *testing.T, h *Handle, c *recConn, g *gate, id, text string) wal.Entry {
	t.Helper()
	if err := h.Send(t.Context(), id, text, nil); err != nil {
		t.Fatal(err)
	}
	expect[*machine.AckOut](t, c)
	expect[*machine.EntryOut](t, c)
	started := expect[*machine.EntryOut](t, c).Entry
	if started.Role != engine.RoleTool || machinetest.MetaString(started, "status") != engine.ToolStarted {
		t.Fatalf("started entry = %+v", started)
	}
	actortest.Recv(t, "the tool run", g.started)
	return started
}

// Completing while a tool runs logs the call as failed, so the log never
// shows a call without an outcome; the tool is cancelled and its result
// never logged.
func TestCompleteDuringTool(t *testing.T) {
	eng := newGatedEngine(false)
	e := newEnv(t, func(c *Config) { c.Engine = eng })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	started := sendToTool(t, h, c, eng.g, "q", "search something")
	if err := h.Complete(t.Context()); err != nil {
		t.Fatal(err)
	}
	failed := expect[*machine.EntryOut](t, c).Entry
	if failed.Seq != 3 || machinetest.MetaString(failed, "status") != engine.ToolFailed || machinetest.MetaString(failed, "call_id") != machinetest.MetaString(started, "call_id") ||
		!strings.Contains(failed.Content, "completed") {
		t.Fatalf("outcome of the call = %+v", failed)
	}
	expect[*machine.CompletedOut](t, c)
	c.waitClosed(t, machine.CloseCompleted)
	actortest.Eventually(t, "the tool is cancelled", func() bool { return eng.g.cancelled.Load() == 1 })
	actortest.Eventually(t, "the actor stops", func() bool { return e.actorOf("s") == nil })
	s := e.snapshot("s", "alice")
	if s.Status != wal.StatusCompleted || s.Pending != nil || s.Header.LastSeq != 3 {
		t.Fatalf("after complete: %+v", s)
	}
	if n := eng.g.runs.Load(); n != 1 {
		t.Fatalf("search ran %d times", n)
	}
}

// A disconnect is not a cancel: the turn goes on without the client, the
// snapshot shows the pending call meanwhile, and the resume replays the
// outcome.
func TestDisconnectMidTool(t *testing.T) {
	eng := newGatedEngine(false)
	e := newEnv(t, func(c *Config) { c.Engine = eng })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	started := sendToTool(t, h, c, eng.g, "q", "best laptop")
	h.Detach()
	e.waitStatus("s", wal.StatusInterrupted)

	p := e.snapshot("s", "alice").Pending
	if p == nil || p.CallID != machinetest.MetaString(started, "call_id") || p.Name != "search" || p.Status != engine.ToolStarted || p.StartedSeq != 2 {
		t.Fatalf("pending call during the run: %+v", p)
	}
	eng.g.progress <- "1 of 3 sources"
	actortest.Eventually(t, "the progress is kept", func() bool {
		p := e.snapshot("s", "alice").Pending
		return p != nil && p.Partial == "1 of 3 sources"
	})
	eng.g.results <- "found 3"
	e.waitHeader("s", "has the reply", func(h wal.Header) bool { return h.LastSeq == 4 })

	c2 := newRecConn("c2")
	_, so, b := e.resume("s", "alice", 2, c2)
	if so.LastSeq != 4 || so.Pending != nil {
		t.Fatalf("session frame = %+v", so)
	}
	if !reflect.DeepEqual(seqsOf(b.Messages), span(3, 4)) {
		t.Fatalf("replay %v, want 3..4", seqsOf(b.Messages))
	}
	tool, reply := b.Messages[0], b.Messages[1]
	if machinetest.MetaString(tool, "status") != engine.ToolCompleted || machinetest.MetaString(tool, "call_id") != p.CallID || machinetest.MetaString(tool, "result") != "found 3" {
		t.Fatalf("replayed tool entry %+v", tool)
	}
	if reply.Role != engine.RoleAgent || !strings.Contains(reply.Content, "best laptop") || !strings.Contains(reply.Content, "found 3") {
		t.Fatalf("replayed reply %+v", reply)
	}
	if n := eng.g.runs.Load(); n != 1 {
		t.Fatalf("search ran %d times, want 1", n)
	}
}

// The train enters a tunnel right after the ack: the detached conn gets
// nothing more, and the resume from the ack gets the whole turn.
func TestRegistryDemoDetachDuringTool(t *testing.T) {
	eng := newGatedEngine(false)
	e := newEnv(t, func(c *Config) { c.Engine = eng })
	c1 := newRecConn("c1")
	h := e.create("s", "alice", c1)
	if err := h.Send(t.Context(), "m1", "laptops", nil); err != nil {
		t.Fatal(err)
	}
	if ack := expect[*machine.AckOut](t, c1); ack.Seq != 1 {
		t.Fatalf("ack = %+v", ack)
	}
	h.Detach()
	actortest.Recv(t, "the tool run", eng.g.started)
	eng.g.results <- `Found 3 results for "laptops".`
	e.waitHeader("s", "has the reply", func(h wal.Header) bool { return h.LastSeq == 4 })
	e.settle("s")
	if hd := e.header("s"); hd.Status != wal.StatusInterrupted {
		t.Fatalf("status %s", hd.Status)
	}
	for _, o := range c1.all() {
		if en, ok := o.(*machine.EntryOut); ok && en.Entry.Seq >= 3 {
			t.Fatalf("the detached conn got entry %d", en.Entry.Seq)
		}
	}
	_, so, b := e.resume("s", "alice", 1, newRecConn("c2"))
	if so.LastSeq != 4 || so.Pending != nil || !reflect.DeepEqual(seqsOf(b.Messages), []uint64{2, 3, 4}) {
		t.Fatalf("resume: %+v, replay %v", so, seqsOf(b.Messages))
	}
	started, done, reply := b.Messages[0], b.Messages[1], b.Messages[2]
	if machinetest.MetaString(started, "status") != engine.ToolStarted || machinetest.MetaString(started, "name") != "search" ||
		machinetest.MetaString(done, "status") != engine.ToolCompleted || machinetest.MetaString(done, "call_id") != machinetest.MetaString(started, "call_id") ||
		reply.Role != engine.RoleAgent || !strings.Contains(reply.Content, done.Content) || machinetest.Uint(reply.Metadata["reply_to"]) != 1 {
		t.Fatalf("replayed turn %s", dumpOuts(entryOuts(b.Messages)))
	}
	if n := eng.g.runs.Load(); n != 1 {
		t.Fatalf("search ran %d times", n)
	}
	if s := e.snapshot("s", "alice"); s.AgentContext["last"] != "laptops" {
		t.Fatalf("agent context %v", s.AgentContext)
	}
}

// Running a sensitive tool marks the session sensitive before it runs; a
// resume then needs a fresh login.
func TestSensitiveToolMarksSession(t *testing.T) {
	eng := newGatedEngine(false)
	e := newEnv(t, func(c *Config) { c.Engine = eng })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	sendToTool(t, h, c, eng.g, "p", "pay the rent")
	if !e.header("s").Sensitive {
		t.Fatal("the session is not marked sensitive while the payment runs")
	}
	eng.g.results <- "receipt 42"
	expect[*machine.EntryOut](t, c)
	expect[*machine.EntryOut](t, c)
	h.Detach()
	e.passivate("s")
	_, err := e.reg.Resume(t.Context(), ResumeRequest{SessionID: "s", UserID: "alice", AuthTime: e.clock.Now().Add(-time.Hour), Conn: newRecConn("x")})
	if !errors.Is(err, machine.ErrReauthRequired) {
		t.Fatalf("stale resume: %v", err)
	}
	if _, so, _ := e.resume("s", "alice", 4, newRecConn("fresh")); !so.Sensitive {
		t.Fatalf("session frame %+v", so)
	}
}

// Close with actors mid-turn: every client is told to reconnect, the
// tool and the engine step are cancelled, nothing is left running (the
// package's goleak check), and the sessions are as the log had them.
func TestCloseMidTurn(t *testing.T) {
	eng := newGatedEngine(false)
	eng.holdNext = make(chan struct{})
	e := newEnv(t, func(c *Config) { c.Engine = eng })
	ct, cn := newRecConn("tool"), newRecConn("next")
	ht := e.create("tool", "alice", ct)
	sendToTool(t, ht, ct, eng.g, "q", "search")
	hn := e.create("next", "alice", cn)
	if err := hn.Send(t.Context(), "q", "slow question", nil); err != nil {
		t.Fatal(err)
	}
	expect[*machine.AckOut](t, cn)
	expect[*machine.EntryOut](t, cn)
	actortest.Eventually(t, "the engine step runs", func() bool { return eng.nexts.Load() == 2 })

	if err := e.reg.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*recConn{ct, cn} {
		if got := c.closeReasons(); !slices.Equal(got, []machine.CloseReason{machine.CloseShutdown}) {
			t.Fatalf("%s: close reasons %v", c.name, got)
		}
	}
	if eng.g.cancelled.Load() != 1 || e.reg.Stats().Active != 0 {
		t.Fatalf("cancelled %d, stats %+v", eng.g.cancelled.Load(), e.reg.Stats())
	}
	if err := e.reg.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := ht.Send(t.Context(), "x", "x", nil); !errors.Is(err, ErrGone) {
		t.Fatalf("send after Close: %v", err)
	}
	if _, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "new", UserID: "alice", Conn: newRecConn("x")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Create after Close: %v", err)
	}
	if _, err := e.log.Header("new"); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("Create after Close stored a session no actor owns: %v", err)
	}
	if _, err := e.reg.Resume(t.Context(), ResumeRequest{SessionID: "tool", UserID: "alice", Conn: newRecConn("x")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Resume after Close: %v", err)
	}
	// Both turns are still owed: the next boot picks them up.
	for _, sid := range []string{"tool", "next"} {
		if st, _ := machine.Stored(wal.SessionData{Header: e.header(sid)}); len(st.Turns) != 1 {
			t.Fatalf("%s: turns %v", sid, st.Turns)
		}
	}
}
