package actor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/machine"
)

// Someone activates a session while its creation is still under way: in
// a cluster, the re-replication pass that a new configuration starts
// finds the new session's copy on disk before the creation returns (make
// test met it: a client asking for a new session was answered internal,
// "session is already active"). The activation must wait for the
// creating actor and share it: the creation succeeds, the session has
// one actor, claimed once.
func TestActivateWhileCreating(t *testing.T) {
	e := newEnv(t)
	var during error
	e.j.mu.Lock()
	e.j.created = func(sid string) {
		// Synchronous, so that it surely comes before the creation ends.
		// It waits for the creating actor, which is ready only when
		// Create has returned: its deadline ends the wait.
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		during = e.reg.Activate(ctx, sid)
	}
	e.j.mu.Unlock()
	c := newRecConn("c")
	h, err := e.reg.Create(t.Context(), CreateRequest{SessionID: "s", UserID: "alice", Conn: c})
	if err != nil {
		t.Fatalf("Create while it was being activated: %v", err)
	}
	if !errors.Is(during, context.DeadlineExceeded) {
		t.Fatalf("the activation during the creation returned %v: want it to wait for the creating actor", during)
	}
	if err := e.reg.Activate(t.Context(), "s"); err != nil {
		t.Fatalf("activation after the creation: %v", err)
	}
	if so := expect[*machine.SessionOut](t, c); so.Reason != machine.ReasonNew || so.Resumed {
		t.Fatalf("session frame = %+v", so)
	}
	chat(t, h, c, "m1", "hello")
	if n := e.j.claims.Load(); n != 0 {
		t.Fatalf("%d claims of a session its creation owns", n)
	}
	if st := e.reg.Stats(); st.Active != 1 || st.Activations != 1 {
		t.Fatalf("stats = %+v: want one actor, activated once", st)
	}
}
