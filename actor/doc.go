// Package actor owns live sessions. Each active session is one goroutine
// (an actor) with one mailbox; it is the only writer of its session's log
// and the only place its seq counter lives.
//
// The logic is the pure state machine Session (session.go, turn.go,
// recover.go): Step(event) returns effects, with no I/O, goroutines or
// clock, so it is tested with tables. actor.go wraps it in the mailbox loop
// that carries the effects out: appends through the Journal (durable before
// anything is shown), deliveries to the attached Conn, engine steps and
// tool runs in goroutines the actor owns.
//
// The Registry activates actors on demand from the log, passivates idle
// ones, recovers what a previous run left at boot, and answers hellos
// (Open). Engines (engine.go) are the agents: Echo by default, Demo with a
// slow search tool and a sensitive payment tool.
//
// The package never touches sockets or HTTP: connections are the Conn
// interface, which the gateway implements.
package actor
