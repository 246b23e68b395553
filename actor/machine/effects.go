package machine

import (
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/wal/record"
)

// Effect is something the runner must carry out: one of the types below,
// sealed like Event. An effect carries everything the runner needs (as
// raft's Ready does): the runner never reads the machine's state, and
// what it learns comes back as an event.
type Effect interface{ isEffect() }

type (
	// Append queues a batch to the journal; its outcome comes back as
	// Appended. Effects the machine emits after it wait until it is
	// durable, unless it is lazy (it records nothing a client is shown: a
	// status change on attach or detach).
	Append struct {
		ID    uint64
		Batch *record.Batch // the journal's once handed over
		Lazy  bool
	}
	// Deliver queues Out for one connection.
	Deliver struct {
		Conn Conn
		Out  Out
	}
	// CloseConn ends one connection, telling the client why.
	CloseConn struct {
		Conn Conn
		Why  CloseReason
		Msg  string
	}
	// Replay sends a resume's history_batch: Messages, of the entries
	// after After (the ones before Messages omitted, and summarized from
	// First, the first of them).
	Replay struct {
		Conn        Conn
		After, Last uint64
		Messages    Span
		First       Span
	}
	// History sends one history page: Messages, the newest entries
	// before Before (0: the newest), at most Limit of them.
	History struct {
		Conn     Conn
		Before   uint64
		Limit    int
		Messages Span
	}
	// LookupSend asks the store whether Send's id is an old one; the
	// answer comes back as SendChecked, before any other event.
	LookupSend struct{ Send Send }
	// RunStep asks the engine for step Step of the turn answering
	// UserSeq; the answer comes back as StepDone (and Parts). Input is
	// the turn's input but for its entries, which the spans give: User,
	// one Span per tool entry of the turn (Steps), History, and First
	// (the session's first entry, for the Summary of what History leaves
	// out, when History does not start at 1).
	RunStep struct {
		UserSeq, Step uint64
		Input         engine.TurnInput
		User, History Span
		Steps         []Span
		First         Span
	}
	// FlushAfter asks for a Flush after After.
	FlushAfter struct{ After time.Duration }
	// RunTool runs Call; its outcome comes back as ToolDone (and
	// ToolProgress).
	RunTool struct {
		SessionID, UserID string
		Call              ToolCall
	}
	// CancelTurn abandons the running step or tool.
	CancelTurn struct{}
	// Answer answers the Attach whose reply channel it carries.
	Answer struct {
		Reply  chan<- Opened
		Result Opened
	}
	// Report answers a Query.
	Report struct {
		Reply chan<- View
		View  View
	}
	// Ended tells the registry a session ended (completed, expired),
	// for its count of each user's live sessions.
	Ended struct {
		UserID string
		Status record.Status
	}
	// Fail stops the actor after a storage failure; the machine has
	// closed its connections already. Moved: the session is owned
	// elsewhere now (fenced). Interrupt: a client was attached, so the
	// session should be marked interrupted once the actor is gone.
	Fail struct {
		Err              error
		Moved, Interrupt bool
	}
	// Stop ends the actor once its appends in flight are answered.
	Stop struct{}
	// Hibernate offers to let the session leave memory while Conns stay
	// open (hibernate.go): the runner may drop the machine, keeping Conns
	// and LastSeq for the Rejoin of the next activation, or decline (mail
	// is waiting) and leave the machine as it is.
	Hibernate struct {
		Conns   []Conn
		LastSeq uint64
	}
)

func (Append) isEffect()     {}
func (Deliver) isEffect()    {}
func (CloseConn) isEffect()  {}
func (Replay) isEffect()     {}
func (History) isEffect()    {}
func (LookupSend) isEffect() {}
func (RunStep) isEffect()    {}
func (FlushAfter) isEffect() {}
func (RunTool) isEffect()    {}
func (CancelTurn) isEffect() {}
func (Answer) isEffect()     {}
func (Report) isEffect()     {}
func (Ended) isEffect()      {}
func (Fail) isEffect()       {}
func (Stop) isEffect()       {}
func (Hibernate) isEffect()  {}

// Span is the entries Lo <= seq < Hi of the session's log. Held are the
// newest of them, copied from the machine's memory; the runner reads the
// rest (Missing) from the journal. An effect's spans are filled when the
// effect is released, so they hold every entry durable by then.
type Span struct {
	Lo, Hi uint64
	Held   []record.Entry
	// HeldBytes is the record.Entry.Size of Held, summed as the tail
	// computed it when the entries came in.
	HeldBytes int
}

// Missing is the range the runner reads from the journal: Lo up to the
// first held entry.
func (sp Span) Missing() (lo, hi uint64) { return sp.Lo, sp.Hi - uint64(len(sp.Held)) }
