package actortest

import (
	"testing"
	"time"
)

// Patience bounds every wait in Tether's tests: generous, since the
// machine the tests run on is shared (two cores, the race detector).
// Nothing waits for time to pass: a wait ends as soon as its condition
// holds.
const Patience = 20 * time.Second

// Eventually polls cond until it holds, failing the test after Patience.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, Patience, what, cond)
}

// EventuallyWithin is Eventually with another bound, for the few waits
// that outlast Patience under load (a cluster agreeing after a change of
// members).
func EventuallyWithin(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", bound, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a wait for an outcome
	}
}

// Recv waits for a value on ch, failing the test after Patience.
func Recv[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Patience):
		t.Fatalf("timed out after %v waiting for %s", Patience, what)
		panic("unreachable")
	}
}
