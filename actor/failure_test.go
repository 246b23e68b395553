package actor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// A failing append stops the actor fail-stop: the client gets internal and
// CloseInternal, nothing of the failed send is shown or stored, the
// session is interrupted once the actor is gone (its window runs), and it
// resumes from the log with the send retryable.
func TestAppendFailureInterruptsSession(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			e := newEnv(t)
			c := newRecConn("c1")
			h := e.create("s", "alice", c)
			chat(t, h, c, "m1", "first")
			e.j.failAppends(1, sync)
			if err := h.Send(t.Context(), "m2", "lost to the disk", nil); err != nil {
				t.Fatal(err)
			}
			if eo := expect[*machine.ErrorOut](t, c); eo.Code != machine.CodeInternal {
				t.Fatalf("error = %+v, want internal", eo)
			}
			c.waitClosed(t, machine.CloseInternal)
			if rest := c.unread(); len(rest) != 0 {
				t.Fatalf("the failed send showed %s", dumpOuts(rest))
			}
			actortest.Eventually(t, "the actor stops", func() bool { return e.actorOf("s") == nil })
			h.Detach() // what the gateway does when the socket ends: reaches no actor
			hd := e.waitStatus("s", wal.StatusInterrupted)
			if hd.LastSeq != 2 || !hd.ExpiresAt.Equal(e.clock.Now().Add(testWindow)) {
				t.Fatalf("after the failure: %+v", hd)
			}
			c2 := newRecConn("c2")
			h2, _, _ := e.resume("s", "alice", 2, c2)
			if seq := chat(t, h2, c2, "m2", "lost to the disk"); seq != 3 {
				t.Fatalf("retried send stored as %d, want 3", seq)
			}
		})
	}
}

// The interrupt of a failed session and a client's resume are one claim
// at a time: the interrupt holds the session's place in the registry, so a
// resume that arrives while it claims waits for it and then activates the
// session afresh. Two claims at once on one node let the later one's fence
// end the earlier one's appends (and in a cluster, one's pull truncate
// what the other had loaded and shown).
func TestInterruptAndResumeClaimInTurn(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "first")
	arrived, open := e.j.holdClaim() // the interrupt's claim waits here
	defer open()
	e.j.failAppends(1, false)
	if err := h.Send(t.Context(), "m2", "lost to the disk", nil); err != nil {
		t.Fatal(err)
	}
	c.waitClosed(t, machine.CloseInternal)
	<-arrived
	if e.actorOf("s") == nil {
		t.Fatal("the interrupt claims the session with no place in the registry: a resume would claim it too")
	}
	c2 := newRecConn("c2")
	resumed := make(chan *Handle, 1)
	go func() {
		h2, _, _ := e.resume("s", "alice", 2, c2)
		resumed <- h2
	}()
	open()
	h2 := <-resumed
	if seq := chat(t, h2, c2, "m2", "sent again"); seq != 3 {
		t.Fatalf("the send after the resume stored as %d, want 3", seq)
	}
	if hd := e.waitStatus("s", wal.StatusActive); hd.LastSeq != 4 {
		t.Fatalf("after the resume: %+v", hd)
	}
	if n := e.j.claimsAtOnce(); n != 1 {
		t.Fatalf("%d claims of the session were under way at once", n)
	}
}

// Whichever of the two gets to the session first after a failure, the
// interrupt or a client's resume, they claim it in turn and the client
// carries on: when the resume's activation is first, the interrupt is
// posted to its actor once it runs (and, the client being attached,
// changes nothing).
func TestInterruptAndResumeRace(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c0")
	h := e.create("s", "alice", c)
	last := chat(t, h, c, "m0", "first") + 1
	for i := range 20 {
		e.j.failAppends(1, false)
		if err := h.Send(t.Context(), fmt.Sprintf("lost%d", i), "lost to the disk", nil); err != nil {
			t.Fatal(err)
		}
		c.waitClosed(t, machine.CloseInternal)
		c = newRecConn(fmt.Sprintf("c%d", i+1))
		h, _, _ = e.resume("s", "alice", last, c)
		last = chat(t, h, c, fmt.Sprintf("m%d", i+1), "again") + 1
	}
	if hd := e.waitStatus("s", wal.StatusActive); hd.LastSeq != last {
		t.Fatalf("after the last resume: %+v, want last seq %d", hd, last)
	}
	if n := e.j.claimsAtOnce(); n != 1 {
		t.Fatalf("%d claims of the session were under way at once", n)
	}
}

// postWait blocks while MailboxSize events wait for the actor, and its
// context unblocks it; post from inside the node never blocks.
func TestMailboxBackpressure(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MailboxSize = 2 })
	c := newStallConn("c")
	t.Cleanup(c.release)
	h, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "s", UserID: "alice", Conn: c})
	if err != nil {
		t.Fatal(err)
	}
	expect[*machine.SessionOut](t, c.recConn)
	c.armed.Store(true)
	if err := h.Send(t.Context(), "m1", "x", nil); err != nil {
		t.Fatal(err)
	}
	actortest.Recv(t, "the actor to stall", c.stalled)
	a := e.actorOf("s")
	for _, id := range []string{"m2", "m3"} {
		if err := h.Send(t.Context(), id, "x", nil); err != nil {
			t.Fatal(err)
		}
	}
	waiting := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.notFull != nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancelled := make(chan error, 1)
	go func() { cancelled <- h.Send(ctx, "m4", "x", nil) }()
	actortest.Eventually(t, "the sender waits", waiting)
	select {
	case err := <-cancelled:
		t.Fatalf("Send into a full mailbox returned %v", err)
	default:
	}
	cancel()
	if err := actortest.Recv(t, "the cancelled send", cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Send: %v", err)
	}
	if !a.post(machine.Tick{}) { // the node's own posts are never held up
		t.Fatal("post refused")
	}
	// A sender waiting for room gets in once the actor drains.
	later := make(chan error, 1)
	go func() { later <- h.Send(t.Context(), "m5", "x", nil) }()
	c.release()
	if err := actortest.Recv(t, "the waiting send", later); err != nil {
		t.Fatal(err)
	}
	var acks []string
	c.waitUntil(t, "four acks", func() bool {
		acks = acks[:0]
		for _, o := range c.outs {
			if ack, ok := o.(*machine.AckOut); ok {
				acks = append(acks, ack.ID)
			}
		}
		return len(acks) == 4
	})
	if fmt.Sprint(acks) != "[m1 m2 m3 m5]" {
		t.Fatalf("acks %v: the cancelled send must not have been queued", acks)
	}
}

// An idle session, even attached, costs no goroutine: the mailbox's
// goroutine exists only while there is mail, and there are no per-session
// timers.
func TestIdleSessionsHaveNoGoroutines(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxSessionsPerUser = -1 })
	c0 := newRecConn("warm")
	chat(t, e.create("warm", "alice", c0), c0, "m1", "warm up")
	e.settle("warm")
	before := runtime.NumGoroutine()
	const n = 200
	for i := range n {
		c := newRecConn(fmt.Sprint("c", i))
		h := e.create(fmt.Sprint("s", i), "alice", c)
		chat(t, h, c, "m1", "hello")
	}
	var now int
	actortest.Eventually(t, "the actors' goroutines exit", func() bool {
		now = runtime.NumGoroutine()
		return now-before < n/10
	})
	if st := e.reg.Stats(); st.Active != n+1 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d idle attached sessions: %d goroutines before, %d after", n, before, now)
}

// Close while an actor is still being activated: the shutdown must wait
// for the machine to exist rather than reach an actor without one.
func TestCloseDuringActivation(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	h.Detach()
	e.passivate("s")

	arrived, release := e.j.holdClaim()
	t.Cleanup(release)
	c2 := newRecConn("c2")
	type result struct {
		h   *Handle
		err error
	}
	resumed := make(chan result, 1)
	go func() {
		h, err := e.reg.Resume(t.Context(), ResumeRequest{SessionID: "s", UserID: "alice", LastSeq: 2, Conn: c2})
		resumed <- result{h, err}
	}()
	actortest.Recv(t, "the activation's claim", arrived)
	closed := make(chan error, 1)
	go func() { closed <- e.reg.Close() }()
	actortest.Eventually(t, "Close starts", func() bool {
		e.reg.mu.Lock()
		defer e.reg.mu.Unlock()
		return e.reg.closed
	})
	release()
	if err := actortest.Recv(t, "Close", closed); err != nil {
		t.Fatal(err)
	}
	res := actortest.Recv(t, "Resume", resumed)
	switch {
	case res.err == nil:
		// It attached before the shutdown: the shutdown closed it.
		c2.waitClosed(t, machine.CloseShutdown)
	case errors.Is(res.err, ErrGone) || errors.Is(res.err, ErrClosed):
	default:
		t.Fatalf("Resume: %v", res.err)
	}
	if st := e.reg.Stats(); st.Active != 0 {
		t.Fatalf("stats after Close: %+v", st)
	}
}

// An activation that fails (here: the session was deleted between the
// hello's header read and the claim) leaves no actor behind, and a Close
// that found the actor while it was activating does not post to it.
func TestFailedActivationDuringClose(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c1")
	h := e.create("s", "alice", c)
	h.Detach()
	e.passivate("s")
	arrived, release := e.j.holdClaim()
	t.Cleanup(release)
	resumed := make(chan error, 1)
	go func() {
		_, err := e.reg.Resume(t.Context(), ResumeRequest{SessionID: "s", UserID: "alice", Conn: newRecConn("c2")})
		resumed <- err
	}()
	actortest.Recv(t, "the activation's claim", arrived)
	if ok, err := e.log.DeleteSession(t.Context(), "s", nil); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- e.reg.Close() }()
	actortest.Eventually(t, "Close starts", func() bool {
		e.reg.mu.Lock()
		defer e.reg.mu.Unlock()
		return e.reg.closed
	})
	release()
	if got := notResumedReason(actortest.Recv(t, "Resume", resumed)); got != machine.ReasonNotFound {
		t.Fatalf("resume of a session deleted under it: %q", got)
	}
	if err := actortest.Recv(t, "Close", closed); err != nil {
		t.Fatal(err)
	}
	if st := e.reg.Stats(); st.Active != 0 || st.Activations != 1 {
		t.Fatalf("stats %+v", st)
	}
}
