package actor

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

const testHibernate = 10 * time.Second

func hibernating(c *Config) { c.HibernateAfter = testHibernate }

// sleep lets sid's attached but quiet session hibernate and waits until
// only its connections are left.
func (e *env) sleep(sid string) {
	e.t.Helper()
	e.settle(sid)
	e.clock.Advance(testHibernate + e.cfg.TickInterval)
	actortest.Eventually(e.t, sid+" hibernates", func() bool {
		e.reg.mu.Lock()
		defer e.reg.mu.Unlock()
		_, asleep := e.reg.asleep[sid]
		return asleep && e.reg.actors[sid] == nil
	})
}

// A quiet session leaves memory with its client attached, and its next
// frame wakes it without the client noticing: no session frame, no
// history_batch, the seqs go on.
func TestHibernateAndWake(t *testing.T) {
	e := newEnv(t, hibernating)
	c := newRecConn("c")
	h := e.create("s1", "alice", c)
	chat(t, h, c, "m1", "hello")
	old := e.actorOf("s1")
	e.sleep("s1")
	if st := e.reg.Stats(); st.Active != 0 || st.Asleep != 1 || st.Hibernations != 1 {
		t.Fatalf("stats asleep = %+v", st)
	}
	if old.s != nil || old.first != nil {
		t.Fatal("the hibernated actor still holds its machine")
	}
	if ids := e.reg.ActiveIDs(); len(ids) != 1 || ids[0] != "s1" {
		t.Fatalf("ActiveIDs = %v: a hibernated session's clients are attached here", ids)
	}
	if hd := e.header("s1"); hd.Status != wal.StatusActive {
		t.Fatalf("a hibernated session is %s in the log", hd.Status)
	}
	if seq := chat(t, h, c, "m2", "again"); seq != 3 {
		t.Fatalf("the send after waking got seq %d", seq)
	}
	if rest := c.unread(); len(rest) != 0 || len(c.closeReasons()) != 0 {
		t.Fatalf("the client noticed the wake: %s, closes %v", dumpOuts(rest), c.closeReasons())
	}
	if st := e.reg.Stats(); st.Active != 1 || st.Asleep != 0 || st.Activations != 2 {
		t.Fatalf("stats awake = %+v", st)
	}
	// A retried send id is still known after the wake.
	if err := h.Send(t.Context(), "m1", "hello", nil); err != nil {
		t.Fatal(err)
	}
	if ack := expect[*machine.AckOut](t, c); ack.Seq != 1 {
		t.Fatalf("a retried send after the wake was acked as %d", ack.Seq)
	}
}

// A session with work owed, or whose clients keep talking, stays awake.
func TestHibernateNotWhileBusyOrTalking(t *testing.T) {
	e := newEnv(t, hibernating)
	c := newRecConn("c")
	h := e.create("s1", "alice", c)
	for i := range 4 {
		e.clock.Advance(testHibernate / 2)
		chat(t, h, c, "m"+string(rune('a'+i)), "x")
		e.settle("s1")
	}
	if e.actorOf("s1") == nil || e.reg.Stats().Hibernations != 0 {
		t.Fatal("a session whose client talks every 5s hibernated after 10s")
	}
	// Mail waiting when the offer comes: the runner declines it.
	e.inspect("s1", func(a *actor) {
		a.mu.Lock()
		a.queue = append(a.queue, machine.Tick{})
		a.mu.Unlock()
		a.hibernate(machine.Hibernate{Conns: []machine.Conn{c}, LastSeq: 8})
		if a.sleep != nil || a.stopping {
			t.Error("hibernation accepted with mail waiting")
		}
	})
}

// Shared clients sleep together. One going away while asleep is just
// dropped; the last one's going wakes the session, which starts the
// reconnect window as a detach always does.
func TestHibernatedDetach(t *testing.T) {
	e := newEnv(t, hibernating)
	c1, c2 := newRecConn("c1"), newRecConn("c2")
	h1 := e.create("s1", "alice", c1)
	chat(t, h1, c1, "m1", "hello")
	h2, err := e.reg.Resume(t.Context(), ResumeRequest{SessionID: "s1", UserID: "alice", LastSeq: 2, AuthTime: e.clock.Now(), Conn: c2, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	expect[*machine.SessionOut](t, c2)
	e.sleep("s1")
	h1.Detach()
	if st := e.reg.Stats(); st.Asleep != 1 || st.Activations != 1 {
		t.Fatalf("one of two sleepers leaving woke the session: %+v", st)
	}
	e.reg.mu.Lock()
	left := e.reg.asleep["s1"].Conns
	e.reg.mu.Unlock()
	if len(left) != 1 || left[0] != machine.Conn(c2) {
		t.Fatalf("sleepers after a detach: %v", left)
	}
	h2.Detach()
	hd := e.waitHeader("s1", "is interrupted", func(h wal.Header) bool { return h.Status == wal.StatusInterrupted })
	if !hd.ExpiresAt.Equal(e.clock.Now().Add(testWindow)) {
		t.Fatalf("window = %v, want from now", hd.ExpiresAt)
	}
	// The client comes back with what it holds and misses nothing.
	c3 := newRecConn("c3")
	_, so, batch := e.resume("s1", "alice", 2, c3)
	if so.LastSeq != 2 || batch == nil || len(batch.Messages) != 0 {
		t.Fatalf("resume after a sleeping detach: %+v, %+v", so, batch)
	}
}

// A hello that is not shared supersedes the sleeping client, as it would
// an awake one; moving the session away or closing the node closes the
// sleepers with 1012 (reconnect).
func TestHibernatedSupersededEvictedClosed(t *testing.T) {
	e := newEnv(t, hibernating)
	c1 := newRecConn("c1")
	h1 := e.create("s1", "alice", c1)
	chat(t, h1, c1, "m1", "hello")
	e.sleep("s1")
	c2 := newRecConn("c2")
	e.resume("s1", "alice", 2, c2)
	c1.waitClosed(t, machine.CloseSuperseded)
	if rest := c1.unread(); len(rest) != 0 {
		t.Fatalf("the superseded sleeper got %s", dumpOuts(rest))
	}

	e.sleep("s1")
	if err := e.reg.Evict(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	c2.waitClosed(t, machine.CloseShutdown)
	if st := e.reg.Stats(); st.Asleep != 0 || st.Active != 0 {
		t.Fatalf("after the evict: %+v", st)
	}

	c3 := newRecConn("c3")
	e.resume("s1", "alice", 2, c3)
	e.sleep("s1")
	e.stop()
	c3.waitClosed(t, machine.CloseShutdown)
}

// Probing a hibernated session (another user, a stale last_seq) does not
// wake it: the probe reads the header, as for a passive session.
func TestHibernatedProbeDoesNotWake(t *testing.T) {
	e := newEnv(t, hibernating)
	c := newRecConn("c")
	h := e.create("s1", "alice", c)
	chat(t, h, c, "m1", "hello")
	e.sleep("s1")
	before := e.reg.Stats()
	if got := notResumedReason(e.resumeErr("s1", "mallory", 0)); got != machine.ReasonNotFound {
		t.Fatalf("another user's resume of a sleeping session: %q", got)
	}
	if after := e.reg.Stats(); after != before || len(c.closeReasons()) != 0 {
		t.Fatalf("a probe woke the session: %+v → %+v, closes %v", before, after, c.closeReasons())
	}
}
