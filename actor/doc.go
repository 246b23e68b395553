// Package actor owns live sessions. An active session lives in memory, in
// its actor: its header and state, its user and agent context, the newest
// entries of its log (the tail), the send ids it has seen, and what is in
// flight. The log (the Journal) is written first and read back only to
// activate a session, to page history older than the tail, and after a
// crash: a steady-state turn reads nothing from the store.
//
// The logic is the pure state machine Session (session.go, turn.go,
// recover.go): Step(now, event) returns effects, with no I/O, goroutines or
// clock, so it is tested with tables. Events and effects are sealed types.
// The machine is where "durable before visible" is enforced: effects that
// follow an append are held back until the journal reports it durable, so
// the actor can take the next event while appends are in flight.
//
// actor.go runs a machine: a mailbox drained by a goroutine that exists
// only while there is mail (an idle session costs no goroutine and no
// timer; the drain runs on one of the registry's parked goroutines,
// package actor/workers, so it does not grow a fresh stack every time),
// carrying out the effects — appends to the Journal, deliveries to
// the attached Conn, engine steps and tool runs in goroutines the actor
// owns.
//
// The Registry (registry.go, open.go, activate.go) activates actors on
// demand from the log, passivates idle ones, recovers what a previous run
// left at boot (in the background: Recovered says when), runs the deadline ticks, liveness mark and retention
// sweep on its Clock, and answers hellos: Resume and Create are separate,
// and the caller chooses a new session's id (in a cluster, so that the
// create goes to that id's owner). Engines are the agents, in package
// actor/engine and under it (Echo by default, Demo, llm for an
// OpenAI-compatible model with MCP tools, httpagent for an agent endpoint
// in any language); this package knows only their contract.
//
// The schema of what the actor keeps in the log besides entries (state.go)
// is this package's: the store keeps it as opaque bytes.
//
// The package never touches sockets or HTTP: connections are the Conn
// interface, which the gateway implements.
package actor
