package actor

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// Registry tests: real actors on a real Pebble log in t.TempDir(), time on
// a ManualClock.

func TestRegistryCreate(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c")
	h, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "chosen-by-caller", UserID: "alice", Conn: c})
	if err != nil || h.SessionID != "chosen-by-caller" || h.Reason != machine.ReasonNew {
		t.Fatalf("Create = %+v, %v", h, err)
	}
	so := expect[*machine.SessionOut](t, c)
	want := machine.SessionOut{SessionID: "chosen-by-caller", Reason: machine.ReasonNew, Status: wal.StatusActive, Window: testWindow}
	if !reflect.DeepEqual(*so, want) {
		t.Fatalf("session frame = %+v, want %+v", *so, want)
	}
	// No history_batch follows a new session: the next frames answer a send.
	chat(t, h, c, "m1", "hello")
	if rest := c.unread(); len(rest) != 0 {
		t.Fatalf("unexpected frames %s", dumpOuts(rest))
	}
	if hd := e.header("chosen-by-caller"); hd.UserID != "alice" || hd.Status != wal.StatusActive || hd.LastSeq != 2 || !hd.CreatedAt.Equal(t0) {
		t.Fatalf("stored header = %+v", hd)
	}
	if st := e.reg.Stats(); st.Active != 1 || st.Activations != 1 {
		t.Fatalf("stats = %+v", st)
	}
	// A reason other than new is what the client is told.
	c2 := newRecConn("c2")
	h2, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "second", UserID: "alice", Reason: machine.ReasonExpired, Conn: c2})
	if err != nil || h2.Reason != machine.ReasonExpired {
		t.Fatalf("Create with a reason = %+v, %v", h2, err)
	}
	if so := expect[*machine.SessionOut](t, c2); so.Reason != machine.ReasonExpired || so.Resumed {
		t.Fatalf("session frame = %+v", so)
	}

	if _, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "chosen-by-caller", UserID: "bob", Conn: newRecConn("x")}); !errors.Is(err, wal.ErrExists) {
		t.Fatalf("Create of a taken id: %v, want wal.ErrExists", err)
	}
	for _, bad := range []string{"", strings.Repeat("x", wal.MaxIDLen+1), "nul\x00id"} {
		if _, err := e.reg.Create(t.Context(), CreateRequest{SessionID: bad, UserID: "alice", Conn: newRecConn("x")}); !errors.Is(err, wal.ErrBadID) {
			t.Fatalf("Create(%q): %v, want wal.ErrBadID", bad, err)
		}
	}
	if hd := e.header("chosen-by-caller"); hd.UserID != "alice" || hd.LastSeq != 2 {
		t.Fatalf("a refused create changed the session: %+v", hd)
	}
}

func TestRegistrySessionLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxSessionsPerUser = 2 })
	ca := newRecConn("a1")
	a1 := e.create("a1", "alice", ca)
	chat(t, a1, ca, "m1", "hi")
	// A failed create (taken id) does not use up a slot.
	if _, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "a1", UserID: "alice", Conn: newRecConn("x")}); !errors.Is(err, wal.ErrExists) {
		t.Fatalf("Create of a taken id: %v", err)
	}
	a2 := e.create("a2", "alice", newRecConn("a2"))
	c3 := newRecConn("a3")
	if _, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "a3", UserID: "alice", Conn: c3}); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("third session: %v, want ErrTooManySessions", err)
	}
	if len(c3.all()) != 0 {
		t.Fatal("a refused create delivered something")
	}
	if _, err := e.log.Header("a3"); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("a refused create stored the session: %v", err)
	}
	e.create("b1", "bob", newRecConn("b1")) // the limit is per user

	// Resuming is never refused at the limit.
	a1.Detach()
	e.waitStatus("a1", wal.StatusInterrupted)
	e.resume("a1", "alice", 2, newRecConn("a1 again"))

	// Completing a session frees its slot.
	if err := a2.Complete(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("a2", wal.StatusCompleted)
	actortest.Eventually(t, "the slot is freed", func() bool {
		e.reg.mu.Lock()
		defer e.reg.mu.Unlock()
		return e.reg.live["alice"] == 1
	})
	e.create("a3", "alice", newRecConn("a3"))

	u := newEnv(t, func(c *Config) { c.MaxSessionsPerUser = -1 })
	for _, sid := range []string{"u1", "u2", "u3"} {
		u.create(sid, "alice", newRecConn(sid))
	}
}

func TestRegistryResumeReplaysMissed(t *testing.T) {
	e := newEnv(t)
	c1 := newRecConn("c1")
	h := e.create("s", "alice", c1)
	chat(t, h, c1, "m1", "one")
	chat(t, h, c1, "m2", "two")
	e.clock.Advance(time.Second)
	h.Detach()
	hd := e.waitStatus("s", wal.StatusInterrupted)
	if !hd.InterruptedAt.Equal(t0.Add(time.Second)) || !hd.ExpiresAt.Equal(t0.Add(time.Second+testWindow)) {
		t.Fatalf("window = %v .. %v", hd.InterruptedAt, hd.ExpiresAt)
	}
	// The client saw up to seq 2; it gets exactly 3 and 4.
	c2 := newRecConn("c2")
	h2, so, b := e.resume("s", "alice", 2, c2)
	if so.Status != wal.StatusActive || so.LastSeq != 4 || so.Window != testWindow {
		t.Fatalf("session frame = %+v", so)
	}
	if !reflect.DeepEqual(seqsOf(b.Messages), []uint64{3, 4}) || b.Omitted != 0 || b.Summary != "" ||
		b.Messages[0].Content != "two" || b.Messages[1].Content != "Agent reply: two" {
		t.Fatalf("batch = %+v", b)
	}
	e.waitStatus("s", wal.StatusActive)

	// Nothing missed: an empty batch, still exactly one.
	h2.Detach()
	e.waitStatus("s", wal.StatusInterrupted)
	c3 := newRecConn("c3")
	h3, _, b := e.resume("s", "alice", 4, c3)
	if len(b.Messages) != 0 || b.Omitted != 0 {
		t.Fatalf("empty batch = %+v", b)
	}
	chat(t, h3, c3, "m3", "three")
	if rest := c3.unread(); len(rest) != 0 {
		t.Fatalf("unexpected frames %s", dumpOuts(rest))
	}
	// A last_seq beyond the log is refused and changes nothing.
	h3.Detach()
	before := e.waitStatus("s", wal.StatusInterrupted)
	if err := e.resumeErr("s", "alice", 99); !errors.Is(err, machine.ErrBadLastSeq) {
		t.Fatalf("Resume with last_seq 99: %v", err)
	}
	e.settle("s")
	if after := e.header("s"); !reflect.DeepEqual(after, before) {
		t.Fatalf("refused resume changed the session:\n%+v\n%+v", after, before)
	}
}

func TestRegistryResumeRefusals(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("alice")
	victim := e.create("victim", "alice", c)
	chat(t, victim, c, "m1", "secret")
	if err := victim.SetContext(t.Context(), map[string]any{"goal": "private"}); err != nil {
		t.Fatal(err)
	}
	expect[*machine.ContextOut](t, c)
	for _, attached := range []bool{true, false} {
		if !attached {
			victim.Detach()
			e.passivate("victim")
		}
		before, stats := e.header("victim"), e.reg.Stats()
		// Another user's id, an unknown one and invalid ones are the same.
		for _, try := range []struct{ sid, user string }{
			{"victim", "mallory"}, {"no-such-session", "alice"}, {strings.Repeat("x", wal.MaxIDLen+1), "alice"}, {"bad\x00id", "alice"}, {"", "alice"},
		} {
			if got := notResumedReason(e.resumeErr(try.sid, try.user, 0)); got != machine.ReasonNotFound {
				t.Fatalf("Resume(%q as %s): reason %q, want not_found", try.sid, try.user, got)
			}
			if _, err := e.reg.Snapshot(t.Context(), try.sid, try.user, e.clock.Now()); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Snapshot(%q as %s): %v", try.sid, try.user, err)
			}
		}
		// Probing activates, claims and changes nothing.
		if after := e.header("victim"); !reflect.DeepEqual(after, before) || e.reg.Stats() != stats {
			t.Fatalf("a probe changed the victim or the registry:\n%+v\n%+v\n%+v", after, before, e.reg.Stats())
		}
		if attached && len(c.closeReasons()) != 0 {
			t.Fatalf("a probe closed alice's conn: %v", c.closeReasons())
		}
	}
	// Alice still resumes, context and all.
	h, so, _ := e.resume("victim", "alice", 2, newRecConn("alice2"))
	if so.Context["goal"] != "private" {
		t.Fatalf("alice's resume = %+v", so)
	}
	if err := h.Complete(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("victim", wal.StatusCompleted)
	if got := notResumedReason(e.resumeErr("victim", "alice", 2)); got != machine.ReasonCompleted {
		t.Fatalf("resume of a completed session: %q", got)
	}
}

func TestRegistryWindowExpiry(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdleTimeout = time.Hour }) // the actor outlives the window
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	detachAt := e.clock.Now()
	h.Detach()
	if hd := e.waitStatus("s", wal.StatusInterrupted); !hd.ExpiresAt.Equal(detachAt.Add(testWindow)) {
		t.Fatalf("expires at %v, want detach + window", hd.ExpiresAt)
	}
	// Resumed with a second to spare; the window restarts at the next detach.
	e.clock.Advance(testWindow - time.Second)
	h2, _, _ := e.resume("s", "alice", 2, newRecConn("c2"))
	detachAt = e.clock.Now()
	h2.Detach()
	e.waitHeader("s", "has a new window", func(hd wal.Header) bool {
		return hd.Status == wal.StatusInterrupted && hd.ExpiresAt.Equal(detachAt.Add(testWindow))
	})
	e.settle("s")
	// The tick at the end of the window expires it in the log.
	e.clock.Advance(testWindow + time.Second)
	e.waitStatus("s", wal.StatusExpired)
	actortest.Eventually(t, "the expired actor stops", func() bool { return e.actorOf("s") == nil })
	if s := e.snapshot("s", "alice"); s.Status != wal.StatusExpired {
		t.Fatalf("snapshot status %s", s.Status)
	}
	if got := notResumedReason(e.resumeErr("s", "alice", 2)); got != machine.ReasonExpired {
		t.Fatalf("late resume: %q", got)
	}
}

// A passive session whose window passed with no actor to see it: the
// snapshot says expired, and the resume that activates it expires it.
func TestRegistryWindowExpiryWhilePassive(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	h.Detach()
	e.passivate("s")
	e.clock.Advance(testWindow)
	if s := e.snapshot("s", "alice"); s.Status != wal.StatusExpired || s.Header.Status != wal.StatusInterrupted {
		t.Fatalf("snapshot: status %s, stored %s", s.Status, s.Header.Status)
	}
	if got := notResumedReason(e.resumeErr("s", "alice", 2)); got != machine.ReasonExpired {
		t.Fatalf("resume past the window: %q", got)
	}
	e.waitStatus("s", wal.StatusExpired)
	actortest.Eventually(t, "the actor stops", func() bool { return e.actorOf("s") == nil })
}

func TestRegistrySupersede(t *testing.T) {
	e := newEnv(t)
	c1 := newRecConn("c1")
	h1 := e.create("s", "alice", c1)
	chat(t, h1, c1, "m1", "hello")
	c2 := newRecConn("c2")
	h2, _, _ := e.resume("s", "alice", 2, c2)
	c1.waitClosed(t, machine.CloseSuperseded)
	// The first conn goes away late: the session stays active on c2, and
	// c1 can no longer act on it.
	h1.Detach()
	if err := h1.Send(t.Context(), "ghost", "from the old conn", nil); err != nil {
		t.Fatal(err)
	}
	chat(t, h2, c2, "m2", "still here") // mailbox order: runs after both
	if hd := e.header("s"); hd.Status != wal.StatusActive || hd.LastSeq != 4 {
		t.Fatalf("after the superseded detach: %+v", hd)
	}
	if rest := c1.unread(); len(rest) != 0 {
		t.Fatalf("the superseded conn got %s", dumpOuts(rest))
	}
}

func TestRegistryComplete(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	if err := h.Complete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if co := expect[*machine.CompletedOut](t, c); co.SessionID != "s" {
		t.Fatalf("completed = %+v", co)
	}
	c.waitClosed(t, machine.CloseCompleted)
	if hd := e.waitStatus("s", wal.StatusCompleted); hd.LastSeq != 2 {
		t.Fatalf("header = %+v", hd)
	}
	actortest.Eventually(t, "the actor stops", func() bool { return e.actorOf("s") == nil })
	h.Detach() // the gateway's usual teardown: harmless
	if err := h.Send(t.Context(), "late", "x", nil); !errors.Is(err, ErrGone) {
		t.Fatalf("send to a completed session's handle: %v, want ErrGone", err)
	}
	if got := notResumedReason(e.resumeErr("s", "alice", 2)); got != machine.ReasonCompleted {
		t.Fatalf("resume after complete: %q", got)
	}
}

func TestRegistrySensitiveNeedsFreshLogin(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	if err := h.SetContext(t.Context(), map[string]any{"sensitive": true}); err != nil {
		t.Fatal(err)
	}
	expect[*machine.ContextOut](t, c)
	h.Detach()
	before := e.waitStatus("s", wal.StatusInterrupted)
	now := e.clock.Now()
	for _, auth := range []time.Time{{}, now.Add(-testReauth - time.Second)} {
		c2 := newRecConn("stale")
		_, err := e.reg.Resume(t.Context(), ResumeRequest{SessionID: "s", UserID: "alice", AuthTime: auth, Conn: c2})
		if !errors.Is(err, machine.ErrReauthRequired) || len(c2.all()) != 0 {
			t.Fatalf("auth_time %v: %v, frames %s", auth, err, dumpOuts(c2.all()))
		}
		if _, err := e.reg.Snapshot(t.Context(), "s", "alice", auth); !errors.Is(err, machine.ErrReauthRequired) {
			t.Fatalf("snapshot with auth_time %v: %v", auth, err)
		}
	}
	e.settle("s")
	if after := e.header("s"); !reflect.DeepEqual(after, before) {
		t.Fatal("a refused resume changed the session")
	}
	_, so, _ := e.resume("s", "alice", 0, newRecConn("fresh"))
	if !so.Sensitive || so.Context["sensitive"] != true {
		t.Fatalf("fresh login: %+v", so)
	}
}
