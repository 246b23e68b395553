package actor

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/actor/machine/machinetest"

	"github.com/tether-dev/tether/wal"
)

// env is a registry on a real Pebble log in a temp dir, written through a
// testJournal, with time on a ManualClock.
type env struct {
	t     *testing.T
	dir   string
	cfg   Config
	clock *actortest.ManualClock
	log   *wal.Log
	j     *testJournal
	reg   *Registry
}

// Defaults of the registry tests: the clock moves only when a test says,
// and the retention sweep is off unless a test turns it on.
const (
	testWindow = 5 * time.Minute
	testIdle   = time.Minute
	testReauth = 5 * time.Minute
	testTick   = time.Second
)

func newEnv(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), clock: actortest.NewManualClock(t0)}
	e.cfg = Config{
		Clock: e.clock, Window: testWindow, IdleTimeout: testIdle, ReauthMaxAge: testReauth,
		TickInterval: testTick, AliveInterval: testTick, SweepInterval: -1, Logger: quiet,
		// Off unless a test turns it on (hibernating): on a clock that
		// jumps minutes, a session left attached would fall asleep
		// between a test's steps.
		HibernateAfter: -1,
	}
	for _, o := range opts {
		o(&e.cfg)
	}
	e.start()
	return e
}

func openLog(t *testing.T, dir string) *wal.Log {
	t.Helper()
	l, err := wal.New(wal.Config{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatalf("wal.New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("wal close: %v", err)
		}
	})
	return l
}

// start opens the log and a registry on it and waits for its boot pass.
// Cleanups run in reverse: held appends are let go, then the registry
// closes, then the log.
func (e *env) start() {
	e.t.Helper()
	e.startWith(nil)
	e.waitRecovered()
}

// startWith is start without the wait; prep sets the journal up before
// the registry opens.
func (e *env) startWith(prep func(*testJournal)) {
	e.t.Helper()
	e.log = openLog(e.t, e.dir)
	e.j = newTestJournal(e.log)
	if prep != nil {
		prep(e.j)
	}
	cfg := e.cfg
	cfg.Journal = e.j
	if st, ok := cfg.Store.(*countingStore); ok {
		st.Log = e.log
	}
	r, err := New(cfg)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.reg = r
	e.t.Cleanup(func() {
		if err := r.Close(); err != nil {
			e.t.Errorf("registry close: %v", err)
		}
	})
	e.t.Cleanup(e.j.release)
}

func (e *env) waitRecovered() {
	e.t.Helper()
	select {
	case <-e.reg.Recovered():
	case <-time.After(10 * time.Second):
		e.t.Fatal("the boot pass did not finish within 10s")
	}
}

// stop closes the registry and the log, as a node stop does.
func (e *env) stop() {
	e.t.Helper()
	e.j.release()
	if err := e.reg.Close(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.log.Close(); err != nil {
		e.t.Fatal(err)
	}
}

// restart stops the node and starts it again on the same directory.
func (e *env) restart() {
	e.t.Helper()
	e.stop()
	e.start()
}

func (e *env) create(sid, user string, c *recConn) *Handle {
	e.t.Helper()
	h, err := e.reg.Create(e.t.Context(), CreateRequest{SessionID: sid, UserID: user, Conn: c})
	if err != nil {
		e.t.Fatalf("Create(%q as %s): %v", sid, user, err)
	}
	// The session frame is delivered before Create returns.
	if len(c.unread()) == 0 {
		e.t.Fatal("Create returned before the session frame was delivered")
	}
	so := expect[*machine.SessionOut](e.t, c)
	if h.Reason != machine.ReasonNew || so.Reason != machine.ReasonNew || so.SessionID != sid || h.SessionID != sid || so.Resumed {
		e.t.Fatalf("new session: handle %+v, frame %+v", h, so)
	}
	return h
}

// resume resumes sid and returns the session frame and the replay.
func (e *env) resume(sid, user string, last uint64, c *recConn) (*Handle, *machine.SessionOut, *machine.BatchOut) {
	e.t.Helper()
	h, err := e.reg.Resume(e.t.Context(), ResumeRequest{SessionID: sid, UserID: user, LastSeq: last, AuthTime: e.clock.Now(), Conn: c})
	if err != nil {
		e.t.Fatalf("Resume(%q as %s from %d): %v", sid, user, last, err)
	}
	// Both frames are delivered before Resume returns.
	if n := len(c.unread()); n < 2 {
		e.t.Fatalf("Resume returned with %d frames delivered: %s", n, dumpOuts(c.unread()))
	}
	so := expect[*machine.SessionOut](e.t, c)
	if h.Reason != machine.ReasonResumed || !so.Resumed || so.Reason != machine.ReasonResumed || so.SessionID != sid {
		e.t.Fatalf("resume: handle %+v, frame %+v", h, so)
	}
	return h, so, expect[*machine.BatchOut](e.t, c)
}

// resumeErr tries to resume and returns why it failed.
func (e *env) resumeErr(sid, user string, last uint64) error {
	e.t.Helper()
	c := newRecConn("refused")
	_, err := e.reg.Resume(e.t.Context(), ResumeRequest{SessionID: sid, UserID: user, LastSeq: last, AuthTime: e.clock.Now(), Conn: c})
	if err == nil {
		e.t.Fatalf("Resume(%q as %s) succeeded", sid, user)
	}
	if got := c.all(); len(got) != 0 || len(c.closeReasons()) != 0 {
		e.t.Fatalf("a refused resume touched its conn: %s %v", dumpOuts(got), c.closeReasons())
	}
	return err
}

func notResumedReason(err error) string {
	var nr *machine.NotResumedError
	if errors.As(err, &nr) && errors.Is(err, machine.ErrNotResumed) {
		return nr.Reason
	}
	return ""
}

// chat sends text to an Echo session and checks the ack, the user entry
// and the reply; it returns the user entry's seq.
func chat(t *testing.T, h *Handle, c *recConn, id, text string) uint64 {
	t.Helper()
	if err := h.Send(t.Context(), id, text, nil); err != nil {
		t.Fatalf("Send: %v", err)
	}
	ack := expect[*machine.AckOut](t, c)
	user := expect[*machine.EntryOut](t, c).Entry
	reply := expect[*machine.EntryOut](t, c).Entry
	if ack.ID != id || user.Seq != ack.Seq || user.Role != engine.RoleUser || user.Content != text || machinetest.MetaString(user, "id") != id {
		t.Fatalf("send %s: ack %+v, entry %+v", id, ack, user)
	}
	if reply.Seq != user.Seq+1 || reply.Role != engine.RoleAgent || reply.Content != "Agent reply: "+text ||
		machinetest.Uint(reply.Metadata["reply_to"]) != user.Seq {
		t.Fatalf("send %s: reply %+v", id, reply)
	}
	return user.Seq
}

// chats sends n messages m0..m{n-1}.
func chats(t *testing.T, h *Handle, c *recConn, n int, text func(i int) string) {
	t.Helper()
	for i := range n {
		chat(t, h, c, fmt.Sprintf("m%d", i), text(i))
	}
}

func (e *env) actorOf(sid string) *actor {
	e.reg.mu.Lock()
	defer e.reg.mu.Unlock()
	return e.reg.actors[sid]
}

// inspect runs fn while it holds sid's actor as its drain would (no
// other goroutine steps the machine meanwhile); false when the actor is
// not active.
func (e *env) inspect(sid string, fn func(a *actor)) bool {
	e.t.Helper()
	a := e.actorOf(sid)
	if a == nil {
		return false
	}
	select {
	case <-a.ready():
	case <-time.After(waitTimeout):
		e.t.Fatal("activation never finished")
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		a.mu.Lock()
		if a.stopped || a.startErr != nil {
			a.mu.Unlock()
			return false
		}
		if !a.running {
			a.running = true
			a.mu.Unlock()
			break
		}
		a.mu.Unlock()
		if time.Now().After(deadline) {
			e.t.Fatal("the actor never stopped draining")
		}
		time.Sleep(time.Millisecond)
	}
	fn(a)
	a.mu.Lock()
	a.running = false
	if len(a.queue) > 0 {
		a.wake()
	}
	a.mu.Unlock()
	return true
}

// settle waits until sid's actor has nothing in flight: no append, no
// engine step, no tool run.
func (e *env) settle(sid string) {
	e.t.Helper()
	actortest.Eventually(e.t, sid+" settles", func() bool {
		idle := true
		e.inspect(sid, func(a *actor) { idle = a.s.Idle() && a.inflight == 0 })
		return idle
	})
}

// passivate lets sid's detached actor go idle, moves the clock past its
// idle timeout and waits for it to passivate.
func (e *env) passivate(sid string) {
	e.t.Helper()
	e.settle(sid)
	e.clock.Advance(e.cfg.IdleTimeout + e.cfg.TickInterval)
	actortest.Eventually(e.t, sid+" passivates", func() bool { return e.actorOf(sid) == nil })
}

func (e *env) header(sid string) wal.Header {
	e.t.Helper()
	h, err := e.log.Header(sid)
	if err != nil {
		e.t.Fatalf("Header(%q): %v", sid, err)
	}
	return h
}

func (e *env) waitHeader(sid, what string, cond func(wal.Header) bool) wal.Header {
	e.t.Helper()
	var h wal.Header
	actortest.Eventually(e.t, sid+" "+what, func() bool {
		var err error
		h, err = e.log.Header(sid)
		return err == nil && cond(h)
	})
	return h
}

func (e *env) waitStatus(sid string, st wal.Status) wal.Header {
	e.t.Helper()
	return e.waitHeader(sid, "is "+string(st), func(h wal.Header) bool { return h.Status == st })
}

func (e *env) snapshot(sid, user string) Snapshot {
	e.t.Helper()
	s, err := e.reg.Snapshot(e.t.Context(), sid, user, e.clock.Now())
	if err != nil {
		e.t.Fatalf("Snapshot(%q): %v", sid, err)
	}
	return s
}

// entriesOf reads sid's whole log.
func (e *env) entriesOf(sid string) []wal.Entry {
	e.t.Helper()
	h := e.header(sid)
	es, err := e.log.Read(sid, 1, h.LastSeq+1, int(h.LastSeq)+1, false)
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

// sameEntries compares entries as a client sees them: numbers in metadata
// by value (msgpack decodes small ones as int8), and without the epoch
// the log stamps on stored entries.
func sameEntries(a, b []wal.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Seq != y.Seq || x.Role != y.Role || x.Content != y.Content || x.Time != y.Time ||
			fmt.Sprint(x.Metadata) != fmt.Sprint(y.Metadata) {
			return false
		}
	}
	return true
}
