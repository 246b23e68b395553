package actor

import (
	"slices"
	"testing"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// Handing a session over to another owner: Evict stops its actor and
// releases the claim; an actor fenced by a newer claim steps down without
// touching the session.

func TestEvict(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	if ids := e.reg.ActiveIDs(); !slices.Equal(ids, []string{"s"}) {
		t.Fatalf("ActiveIDs = %v", ids)
	}
	if err := e.reg.Evict(t.Context(), "s"); err != nil {
		t.Fatal(err)
	}
	c.waitClosed(t, machine.CloseShutdown)
	if e.actorOf("s") != nil || len(e.reg.ActiveIDs()) != 0 {
		t.Fatal("the evicted actor is still in memory")
	}
	if err := e.reg.Evict(t.Context(), "s"); err != nil {
		t.Fatalf("Evict of a passive session: %v", err)
	}
	// The claim is released: another owner can take the session, and
	// finds it as the log has it.
	d, err := e.log.Claim(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if d.Header.LastSeq != 2 || d.Header.Epoch != 2 {
		t.Fatalf("taken over: %+v", d.Header)
	}
	if err := e.log.Release(t.Context(), "s", d.Header.Epoch); err != nil {
		t.Fatal(err)
	}
}

func TestFencedActorStepsDown(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	chat(t, h, c, "m1", "hello")
	// Another owner claims the session: this actor's next append is fenced.
	d, err := e.log.Claim(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.log.Release(t.Context(), "s", d.Header.Epoch) })
	if err := h.Send(t.Context(), "m2", "too late", nil); err != nil {
		t.Fatal(err)
	}
	c.waitClosed(t, machine.CloseShutdown)
	actortest.Eventually(t, "the actor steps down", func() bool { return e.actorOf("s") == nil })
	if rest := c.unread(); len(rest) != 0 {
		t.Fatalf("the fenced actor showed %s", dumpOuts(rest))
	}
	// The session is the new owner's: not interrupted behind its back.
	if hd := e.header("s"); hd.Status != wal.StatusActive || hd.Epoch != d.Header.Epoch || hd.LastSeq != 2 {
		t.Fatalf("header after the step-down: %+v", hd)
	}
}
