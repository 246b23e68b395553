// Package actor runs live sessions: the runner of the session machine
// (package actor/machine), the registry that activates, passivates and
// recovers sessions, and the journal contract they write through.
//
// An active session lives in memory, in its actor: a machine.Machine with
// its header and state, its user and agent context, the newest entries of
// its log (the tail), the send ids it has seen, and what is in flight.
// The log (the Journal) is written first and read back only to activate a
// session, to page history older than the tail, and after a crash: a
// steady-state turn reads nothing from the store.
//
// actor.go is the runner: a mailbox drained by a goroutine that exists
// only while there is mail (an idle session costs no goroutine and no
// timer; the drain runs on one of the registry's parked goroutines,
// package actor/workers, so it does not grow a fresh stack every time).
// It steps the machine with one event at a time and carries out the
// effects in order: appends to the Journal, deliveries to the attached
// Conns, engine steps and tool runs in goroutines the actor owns, reads
// of what the machine's memory no longer holds (replay.go, steps.go).
// Whatever an effect learns comes back as an event through the mailbox;
// the runner never steps the machine from inside an effect and never
// reads its state.
//
// The Registry (registry.go, open.go, activate.go, recover.go) activates
// actors on demand from the log, passivates idle ones, lets quiet ones
// hibernate with their clients attached (hibernate.go: only the
// connections stay; the next frame wakes the session), recovers what a
// previous run left at boot (in the background: Recovered says when),
// runs the deadline ticks, liveness mark and retention sweep on its
// Clock, and answers hellos: Resume and Create are separate, and the
// caller chooses a new session's id (in a cluster, so that the create
// goes to that id's owner). Engines are the agents, in package
// actor/engine and under it; this package knows only their contract.
//
// The exported surface:
//
//   - Registry, New, Config: the sessions of a node (Resume, Create,
//     Snapshot, Activate, Evict, ActiveIDs, NewID, Recovered, Stats, Close).
//   - Handle, ResumeRequest, CreateRequest: a connection's way to its
//     session (Send, Interrupt, Cancel, Approve, SetContext, Complete,
//     History, Detach).
//   - Snapshot: a session as GET /v1/sessions/{id} shows it.
//   - Journal, Store: what the log must do; *wal.Log and the cluster's
//     replicated journal supply them.
//   - Clock, Timer: time, injected (a manual clock for tests is in package
//     actor/actortest).
//   - ErrGone, ErrClosed, ErrNotFound, ErrTooManySessions: what callers
//     branch on, besides the machine's errors.
//
// The package never touches sockets or HTTP: connections are the
// machine.Conn interface, which the gateway implements.
package actor
