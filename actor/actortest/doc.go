// Package actortest is test support for the actor and the packages above
// it, as httptest is for net/http: a clock that moves only when told
// (ManualClock, an actor.Clock), the one way Tether's tests wait for
// a condition (Eventually, Recv), bounded by Patience (EventuallyWithin
// for the rare wait that needs longer), and the logger of the nodes a
// test starts, which shows their last lines only if the test fails
// (Logger).
//
// It imports nothing of Tether's, so that every package's own tests can
// use it.
//
// The exported surface:
//
//   - ManualClock, NewManualClock: an actor.Clock that moves only when
//     told (Advance, AfterFunc, Now).
//   - Eventually, Recv: wait for a condition, or for a value on a
//     channel, failing the test after Patience.
//   - EventuallyWithin: Eventually with another bound (a cluster
//     agreeing after a change of members, under load).
//   - Patience: the bound on waits in Tether's tests.
//   - Logger, Kept: a logger that keeps the newest Kept lines and prints
//     them when the test fails (TETHER_TEST_LOG=1: everything, as it
//     happens).
//   - Quiet: the logger of test components no one test owns, silent
//     unless TETHER_TEST_LOG is set.
package actortest
