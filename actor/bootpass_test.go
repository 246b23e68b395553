package actor

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/wal"
)

// leaveInterrupted creates detached, passivated sessions of alice, stops
// the node and keeps it down for an hour: far past their five-minute
// windows, which only the boot pass's downtime extension keeps open.
func leaveInterrupted(t *testing.T, e *env, sids ...string) (stop time.Time, expires map[string]time.Time) {
	t.Helper()
	expires = make(map[string]time.Time)
	for _, sid := range sids {
		c := newRecConn(sid)
		h := e.create(sid, "alice", c)
		chat(t, h, c, "m1", sid)
		h.Detach()
		expires[sid] = e.waitStatus(sid, wal.StatusInterrupted).ExpiresAt
		e.settle(sid)
		e.passivate(sid)
	}
	stop = e.clock.Now()
	e.stop()
	e.clock.Advance(time.Hour)
	return stop, expires
}

// startHeldOnA starts the node with the boot pass held on its claim of
// its first session, which must be a; release lets it go on.
func (e *env) startHeldOnA() (release func()) {
	e.t.Helper()
	var arrived <-chan string
	e.startWith(func(j *testJournal) { arrived, release = j.holdClaim() })
	if sid := actortest.Recv(e.t, "the pass to claim its first session", arrived); sid != "a" {
		release()
		e.t.Fatalf("the pass claimed %q first", sid)
	}
	return release
}

func lastAlive(t *testing.T, e *env) time.Time {
	t.Helper()
	at, ok, err := e.log.LastAlive()
	if err != nil || !ok {
		t.Fatalf("LastAlive: %v %v", ok, err)
	}
	return at
}

// The boot pass runs in the background: New returns while a session's
// recovery waits on its claim (after a whole-cluster restart, on peers
// that are booting too). A client resuming a session the pass has not
// reached recovers it itself; one resuming the session being recovered
// waits for it; the node says it was alive only once every session is
// recovered.
func TestBootPassInBackground(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxActivations = 1 })
	stop, _ := leaveInterrupted(t, e, "a", "b")
	release := e.startHeldOnA()
	defer release()
	select {
	case <-e.reg.Recovered():
		t.Fatal("Recovered closed while a session waits on its claim")
	default:
	}

	// b: not reached yet (one worker, held on a); the client's resume
	// recovers it first, so its window is extended, not expired.
	e.resume("b", "alice", 2, newRecConn("b2"))

	// a: the pass's placeholder holds it; the resume waits, then
	// activates what the pass recovered.
	type result struct{ err error }
	done := make(chan result, 1)
	go func() {
		_, err := e.reg.Resume(t.Context(), ResumeRequest{SessionID: "a", UserID: "alice", LastSeq: 2, AuthTime: e.clock.Now(), Conn: newRecConn("a2")})
		done <- result{err}
	}()
	if at := lastAlive(t, e); !at.Equal(stop) {
		t.Fatalf("liveness marked at %v before the pass ended (stop %v)", at, stop)
	}
	release()
	if r := actortest.Recv(t, "a's resume", done); r.err != nil {
		t.Fatalf("resume a: %v", r.err)
	}
	e.waitRecovered()
	if at := lastAlive(t, e); at.Before(e.clock.Now()) {
		t.Fatalf("liveness %v not marked when the pass ended (now %v)", at, e.clock.Now())
	}
}

// Close during the boot pass cancels the recovery waiting on its claim and
// leaves the liveness mark of the previous run: the next boot still
// extends every window by the whole downtime.
func TestCloseDuringBootPass(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxActivations = 1 })
	_, expires := leaveInterrupted(t, e, "a")
	var arrived <-chan string
	e.startWith(func(j *testJournal) { arrived, _ = j.holdClaim() })
	actortest.Recv(t, "the pass to claim a", arrived)
	closed := make(chan error, 1)
	go func() { closed <- e.reg.Close() }()
	if err := actortest.Recv(t, "Close", closed); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.log.Close(); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	e.start()
	if at := lastAlive(t, e); !at.Equal(e.clock.Now()) {
		t.Fatalf("liveness %v, want the second boot %v", at, e.clock.Now())
	}
	h := e.header("a")
	if want := expires["a"].Add(2 * time.Hour); h.Status != wal.StatusInterrupted || !h.ExpiresAt.Equal(want) {
		t.Fatalf("a: %+v, want interrupted until %v", h, want)
	}
	e.resume("a", "alice", 2, newRecConn("a2"))
}

// A snapshot of a session the boot pass has not reached yet shows it
// recovered (interrupted: its client went with the restart), not what the
// log said before the restart.
func TestSnapshotBeforeTheBootPassRecovers(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxActivations = 1 })
	for _, sid := range []string{"a", "b"} {
		c := newRecConn(sid)
		h := e.create(sid, "alice", c)
		chat(t, h, c, "m1", sid)
	}
	e.stop() // their clients attached: the log says active
	release := e.startHeldOnA()
	defer release()
	snap, err := e.reg.Snapshot(t.Context(), "b", "alice", e.clock.Now())
	if err != nil || snap.Status != wal.StatusInterrupted || snap.Header.LastSeq != 2 {
		t.Fatalf("snapshot of b before the pass reached it: %+v, %v", snap.Header, err)
	}
}
