package actor

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/actor/machine/machinetest"

	"github.com/tether-dev/tether/wal"
)

// Boot recovery brings what a previous run left up to date: a session
// that was active gets a fresh window from boot; an interrupted one has
// its window extended by the downtime (from the last liveness mark); one
// whose window ended before the stop is expired; one another node owns is
// left alone.
func TestBootRecovery(t *testing.T) {
	e := newEnv(t)
	// "old" is detached at t0 and passivated: its window ends at t0+5m,
	// before the stop, with no actor left to see it.
	co := newRecConn("old")
	old := e.create("old", "alice", co)
	chat(t, old, co, "m1", "old")
	old.Detach()
	e.passivate("old")
	// "int" is detached a minute later; its window is open at the stop.
	ci := newRecConn("int")
	in := e.create("int", "alice", ci)
	chat(t, in, ci, "m1", "int")
	in.Detach()
	intHdr := e.waitStatus("int", wal.StatusInterrupted)
	e.settle("int")
	e.clock.Advance(4*time.Minute + 30*time.Second) // past old's window, inside int's
	// "act" and "other" are attached at the stop.
	ca, cx := newRecConn("act"), newRecConn("other")
	act := e.create("act", "alice", ca)
	chat(t, act, ca, "m1", "act")
	e.create("other", "alice", cx)
	otherHdr := e.header("other")
	stop := e.clock.Now()
	if !stop.After(e.header("old").ExpiresAt) || !stop.Before(intHdr.ExpiresAt) {
		t.Fatal("test setup: the windows are not where they should be")
	}
	e.stop()
	ca.waitClosed(t, machine.CloseShutdown)
	cx.waitClosed(t, machine.CloseShutdown)
	act.Detach() // the gateway's teardown after the shutdown: returns, changes nothing

	e.clock.Advance(time.Hour) // down for an hour
	boot := e.clock.Now()
	e.cfg.Owns = func(sid string) bool { return sid != "other" }
	e.start()

	if h := e.header("act"); h.Status != wal.StatusInterrupted || !h.InterruptedAt.Equal(boot) || !h.ExpiresAt.Equal(boot.Add(testWindow)) {
		t.Fatalf("act: %+v, want interrupted from boot", h)
	}
	if h := e.header("int"); h.Status != wal.StatusInterrupted || !h.ExpiresAt.Equal(intHdr.ExpiresAt.Add(boot.Sub(stop))) {
		t.Fatalf("int: %+v, want its window extended by %v", h, boot.Sub(stop))
	}
	if h := e.header("old"); h.Status != wal.StatusExpired {
		t.Fatalf("old: %+v, want expired", h)
	}
	if h := e.header("other"); !reflect.DeepEqual(h, otherHdr) {
		t.Fatalf("a session this node does not own was touched:\n%+v\n%+v", h, otherHdr)
	}
	if st := e.reg.Stats(); st.Active != 0 {
		t.Fatalf("sessions without work were activated: %+v", st)
	}
	e.reg.mu.Lock()
	live := e.reg.live["alice"]
	e.reg.mu.Unlock()
	if live != 2 {
		t.Fatalf("alice has %d live sessions here, want 2 (act and int)", live)
	}
	e.resume("act", "alice", 2, newRecConn("act2"))
	e.resume("int", "alice", 2, newRecConn("int2"))
	if got := notResumedReason(e.resumeErr("old", "alice", 2)); got != machine.ReasonExpired {
		t.Fatalf("old: %q", got)
	}
}

// startToolThenStop sends a message to a session on eng, waits until its
// tool runs, and stops the node. The tool is cut short.
func startToolThenStop(t *testing.T, e *env, eng *gatedEngine) {
	t.Helper()
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	if err := h.Send(t.Context(), "m1", "laptops", nil); err != nil {
		t.Fatal(err)
	}
	expect[*machine.AckOut](t, c)
	expect[*machine.EntryOut](t, c)
	if en := expect[*machine.EntryOut](t, c).Entry; machinetest.MetaString(en, "status") != engine.ToolStarted {
		t.Fatalf("entry 2 = %+v", en)
	}
	actortest.Recv(t, "the tool to run", eng.g.started)
	e.stop()
	if got := c.closeReasons(); !reflect.DeepEqual(got, []machine.CloseReason{machine.CloseShutdown}) {
		t.Fatalf("close reasons at shutdown %v", got)
	}
	if eng.g.runs.Load() != 1 || eng.g.cancelled.Load() != 1 {
		t.Fatalf("runs %d, cancelled %d", eng.g.runs.Load(), eng.g.cancelled.Load())
	}
}

// waitTurnDone waits until sid's log ends with the agent's reply.
func waitTurnDone(t *testing.T, e *env, sid string, seq uint64) []wal.Entry {
	t.Helper()
	e.waitHeader(sid, "has the reply", func(h wal.Header) bool { return h.LastSeq >= seq })
	es := e.entriesOf(sid)
	if uint64(len(es)) != seq || es[seq-1].Role != engine.RoleAgent {
		t.Fatalf("log %s", dumpOuts(entryOuts(es)))
	}
	return es
}

func entryOuts(es []wal.Entry) []machine.Out {
	out := make([]machine.Out, len(es))
	for i, en := range es {
		out[i] = &machine.EntryOut{Entry: en}
	}
	return out
}

func TestRestartInterruptsNonIdempotentTool(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Engine = newGatedEngine(false) })
	startToolThenStop(t, e, e.cfg.Engine.(*gatedEngine))
	eng := newGatedEngine(false)
	e.cfg.Engine = eng
	e.start()
	es := waitTurnDone(t, e, "s", 4)
	failed := es[2]
	if machinetest.MetaString(failed, "status") != engine.ToolFailed || failed.Content != engine.ResultInterrupted || machinetest.MetaString(failed, "call_id") != machinetest.MetaString(es[1], "call_id") {
		t.Fatalf("entry 3 = %+v, want the call failed as interrupted", failed)
	}
	if !strings.Contains(es[3].Content, "did not finish (interrupted)") || machinetest.Uint(es[3].Metadata["reply_to"]) != 1 {
		t.Fatalf("entry 4 = %+v", es[3])
	}
	if n := eng.g.runs.Load(); n != 0 {
		t.Fatalf("a non-idempotent tool ran %d times after the restart", n)
	}
	if machine.HasWork(e.header("s")) {
		t.Fatalf("work still owed: %+v", e.header("s"))
	}
}

func TestRestartRerunsIdempotentTool(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Engine = newGatedEngine(true) })
	startToolThenStop(t, e, e.cfg.Engine.(*gatedEngine))
	eng := newGatedEngine(true)
	e.cfg.Engine = eng
	e.start()
	run := actortest.Recv(t, "the re-run", eng.g.started)
	if run.Name != "search" || run.Args["query"] != "laptops" {
		t.Fatalf("re-run = %+v", run)
	}
	if st, _ := machine.Stored(wal.SessionData{Header: e.header("s")}); st.Pending == nil || st.Pending.Attempts != 1 {
		t.Fatalf("the attempt is not durable before the run: %+v", st.Pending)
	}
	eng.g.results <- "3 results"
	es := waitTurnDone(t, e, "s", 4)
	if machinetest.MetaString(es[2], "status") != engine.ToolCompleted || es[2].Content != "3 results" || !strings.Contains(es[3].Content, "3 results") {
		t.Fatalf("entries %s", dumpOuts(entryOuts(es)))
	}
	if n := eng.g.runs.Load(); n != 1 {
		t.Fatalf("the idempotent tool ran %d times after the restart, want 1", n)
	}
}

// The registry's retention sweep runs on its clock: it deletes what is
// over and past retention, and recounts each user's live sessions (a
// window that passed with no actor frees its slot).
func TestSweepThroughRegistry(t *testing.T) {
	store := &countingStore{}
	e := newEnv(t, func(c *Config) {
		// Longer than passivate's step: the only sweeps are those the
		// test's own steps of the clock start (one that started during
		// passivate could end after the step below, and count b1 live).
		c.Store, c.Retention, c.SweepInterval, c.MaxSessionsPerUser = store, time.Hour, 2*time.Minute, 1
	})
	cd := newRecConn("done")
	done := e.create("done", "alice", cd)
	chat(t, done, cd, "m1", "bye")
	if err := done.Complete(t.Context()); err != nil {
		t.Fatal(err)
	}
	cd.waitClosed(t, machine.CloseCompleted)
	cb := newRecConn("b1")
	b1 := e.create("b1", "bob", cb)
	chat(t, b1, cb, "m1", "hi")
	b1.Detach()
	e.passivate("b1")
	if _, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "b2", UserID: "bob", Conn: newRecConn("b2")}); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("bob's second session: %v", err)
	}
	// b1's window passes with no actor; the next sweep's recount sees it.
	sweeps := store.sweeps.Load()
	e.clock.Advance(testWindow)
	actortest.Eventually(t, "a sweep", func() bool { return store.sweeps.Load() > sweeps })
	actortest.Eventually(t, "bob's slot is free", func() bool {
		e.reg.mu.Lock()
		defer e.reg.mu.Unlock()
		return e.reg.live["bob"] == 0
	})
	e.create("b2", "bob", newRecConn("b2"))
	for _, sid := range []string{"done", "b1"} {
		e.header(sid) // not past retention yet
	}
	// An hour after their last activity both are deleted; b2 is live.
	e.clock.Advance(time.Hour)
	actortest.Eventually(t, "the sweep deletes them", func() bool {
		_, err1 := e.log.Header("done")
		_, err2 := e.log.Header("b1")
		return errors.Is(err1, wal.ErrNotFound) && errors.Is(err2, wal.ErrNotFound)
	})
	if got := notResumedReason(e.resumeErr("done", "alice", 0)); got != machine.ReasonNotFound {
		t.Fatalf("resume of a swept session: %q", got)
	}
	e.header("b2")
}

// The sweep starts only after boot recovery: a session whose window was
// open when the node stopped looks expired and past retention after a
// long downtime, but recovery extends its window first.
func TestSweepRunsAfterRecovery(t *testing.T) {
	store := &countingStore{}
	e := newEnv(t, func(c *Config) { c.Store, c.Retention, c.SweepInterval = store, time.Minute, time.Minute })
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	h.Detach()
	e.waitStatus("s", wal.StatusInterrupted)
	e.settle("s")
	e.stop()
	e.clock.Advance(2 * time.Hour)
	e.start()
	sweeps := store.sweeps.Load()
	e.clock.Advance(time.Minute)
	actortest.Eventually(t, "a sweep after the restart", func() bool { return store.sweeps.Load() > sweeps })
	if hd := e.header("s"); hd.Status != wal.StatusInterrupted || !hd.ExpiresAt.After(e.clock.Now()) {
		t.Fatalf("after restart: %+v (now %v)", hd, e.clock.Now())
	}
	e.resume("s", "alice", 2, newRecConn("c2"))
}
