package actor

import (
	"time"
)

// Clock is the registry's source of time: the moment events happen, and
// the timers of its periodic jobs (deadline ticks, liveness marks, the
// retention sweep). Tests inject a manual one (package actor/actortest)
// to make expiry and passivation deterministic.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc: Stop prevents the call if it has not
// happened, and reports whether it did. It is an alias of the interface
// literal, so that a clock outside this package (a test's, package
// actor/actortest) need not import it to implement Clock.
type Timer = interface{ Stop() bool }

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
