// Package machine is the state machine of one session, pure: Step takes
// an event and the time and returns effects, with no I/O, goroutines or
// clock, so it is tested with tables of typed events and effects. The
// runner (package actor) owns a Machine per active session, feeds it
// events from its mailbox and carries out its effects; etcd's raft
// RawNode and its Ready are the model.
//
// Events (events.go) are what happens to a session: a client's requests
// (Attach, Send, Cancel, Approve, SetContext, Complete, HistoryRequest,
// Detach) and what the runner reports back (Appended, StepDone, Part,
// ToolDone, ToolProgress, SendChecked, Tick, Flush, Start, Recover,
// Shutdown, Query, Rejoin). Effects (effects.go) are what the runner must
// do (Append, Deliver, CloseConn, Replay, History, RunStep, RunTool,
// LookupSend, FlushAfter, CancelTurn, Answer, Report, Ended, Fail,
// Stop, Hibernate). Both sets are sealed, and a test proves every event has a case
// in Step and every effect one in the runner.
//
// An effect carries everything the runner needs: the runner never reads
// the machine's state, and what it learns comes back as an event. An
// effect that reads the log carries Spans: the bounds, and the entries
// the machine's memory holds, copied when the effect is released; the
// runner reads only what has left memory from the journal.
//
// Durable before visible is enforced here: effects that follow an append
// are held until the journal reports it durable (Appended), and the
// in-memory tail (tail.go) takes entries only then. A failed append is
// fail-stop: the machine closes its clients and emits Fail.
//
// Hibernation (hibernate.go): a session whose clients are attached but
// quiet offers, on a Tick, to leave memory with their connections kept
// (Hibernate); the activation that wakes it starts with a Rejoin that
// attaches them again without a word to them.
//
// Its tests are tables of typed events and effects (*_test.go) and
// traces (testdata/*.txt, run by TestMachineTraces with
// cockroachdb/datadriven, as etcd's raft keeps its own): a directive per
// event, the effects Step returned under it. A new behaviour of the
// machine is written as a trace first.
//
// The schema of what a session keeps in the log besides its entries
// (state.go: the pending tool call, the turns owed, the contexts) is this
// package's; the store keeps it as opaque bytes.
//
// The exported surface:
//
//   - Machine, New, Config, Restore, Damage: a session's machine, made
//     from what the log holds; Step, Deadline, Header, Idle, HasWork.
//   - Event and its types; Opened (an Attach's answer); View (a Query's).
//   - Effect and its types; Span.
//   - Conn, CloseReason, Out and the *Out types: the client side (a
//     BatchOut holds entries as stored and as held: Entries, Decoded,
//     First).
//   - Reason*, Code*, and the errors a hello is refused with
//     (ErrReauthRequired, ErrBadLastSeq, ErrTooManyConns,
//     NotResumedError, ErrNotResumed) and ErrUnavailable; MayReveal.
//   - ToolCall, StreamMark, HasWork, Stored: what the state holds.
//   - DefaultHistoryLimit, MaxHistoryLimit, DefaultReplayLimit.
//
// The package imports no network code: the engines' contract comes from
// package actor/engine, the records from package record.
package machine
