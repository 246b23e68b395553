package actor

import (
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal"
)

// Event is something that happens to a session: one of the ev* types.
// The set is sealed (isEvent is unexported) so Step can switch over all of
// them, and an event no case knows is a bug it reports, never silence.
type Event interface{ isEvent() }

type (
	// evStart: the actor was just activated; resume half-done work.
	evStart struct{}
	// evAttach: a hello (resume or, with newReason set, a new session).
	evAttach struct {
		conn      Conn
		userID    string
		lastSeq   uint64
		authTime  time.Time
		stream    *StreamMark
		newReason string
		// shared keeps the connections already attached.
		shared bool
		reply  chan<- opened // capacity 1
	}
	evDetach struct{ conn Conn }
	evSend   struct {
		conn     Conn
		id       string
		content  string
		metadata map[string]any
		// interrupt cancels the running turn before this send's.
		interrupt bool
	}
	// evCancel stops the turn answering replyTo (0: the running one).
	evCancel struct {
		conn    Conn
		replyTo uint64
	}
	// evApprove is the user's decision on a call awaiting approval.
	evApprove struct {
		conn     Conn
		callID   string
		approved bool
	}
	// evSendChecked: the store said whether a send id the filters may
	// hold is really an old one.
	evSendChecked struct {
		send  evSend
		seq   uint64
		found bool
	}
	evContext struct {
		conn Conn
		set  map[string]any
	}
	evComplete struct{ conn Conn }
	evHistory  struct {
		conn   Conn
		before uint64
		limit  int
	}
	evAction struct {
		step    uint64 // of the effStep it answers
		userSeq uint64
		action  engine.Action
		err     error
	}
	// evPart is text of the reply a streaming engine is writing.
	evPart struct {
		step uint64
		text string
	}
	// evFlush: the flush interval after the last delta has passed.
	evFlush    struct{}
	evToolDone struct {
		callID string
		result string
		err    error
	}
	evToolProgress struct {
		callID  string
		partial string
	}
	// evAppended: the journal finished append id (and every one before).
	evAppended struct {
		id  uint64
		err error
	}
	evTick     struct{}
	evShutdown struct{}
)

func (evStart) isEvent()        {}
func (evAttach) isEvent()       {}
func (evDetach) isEvent()       {}
func (evSend) isEvent()         {}
func (evSendChecked) isEvent()  {}
func (evCancel) isEvent()       {}
func (evApprove) isEvent()      {}
func (evContext) isEvent()      {}
func (evComplete) isEvent()     {}
func (evHistory) isEvent()      {}
func (evAction) isEvent()       {}
func (evPart) isEvent()         {}
func (evFlush) isEvent()        {}
func (evToolDone) isEvent()     {}
func (evToolProgress) isEvent() {}
func (evAppended) isEvent()     {}
func (evTick) isEvent()         {}
func (evShutdown) isEvent()     {}

// opened answers an attach: the reason, or err for a refusal that changes
// nothing (reauth, bad last_seq, not resumable).
type opened struct {
	reason string
	err    error
}

// Effect is something the actor goroutine must carry out: one of the eff*
// types, sealed like Event.
type Effect interface{ isEffect() }

type (
	// effAppend queues a batch to the journal. Effects the machine emits
	// after it wait until it is durable, unless it is lazy (it records
	// nothing a client is shown: a status change on attach or detach).
	effAppend struct {
		id    uint64
		batch *wal.Batch // the journal's once handed over
		lazy  bool
	}
	effDeliver struct {
		conn Conn
		out  Out
	}
	effClose struct {
		conn Conn
		why  CloseReason
		msg  string
	}
	// effReplay sends a resume's history_batch: entries after..last.
	effReplay struct {
		conn        Conn
		after, last uint64
	}
	effHistory struct {
		conn   Conn
		before uint64
		limit  int
	}
	// effLookupSend asks the store whether send's id is an old one; the
	// answer comes back as evSendChecked at once.
	effLookupSend struct{ send evSend }
	effStep       struct{ userSeq, step uint64 }
	// effFlushAfter asks for an evFlush after d.
	effFlushAfter struct{ d time.Duration }
	effRunTool    struct{ call ToolCall }
	// effCancelTurn abandons the running step or tool.
	effCancelTurn struct{}
	// effOpened answers the attach whose reply channel it carries.
	effOpened struct {
		reply chan<- opened
		res   opened
	}
	// effStatus tells the registry a session ended (completed, expired),
	// for its count of each user's live sessions.
	effStatus struct {
		userID string
		status wal.Status
	}
	// effFail stops the actor after a storage failure.
	effFail struct{ err error }
	effStop struct{}
)

func (effAppend) isEffect()     {}
func (effDeliver) isEffect()    {}
func (effClose) isEffect()      {}
func (effReplay) isEffect()     {}
func (effHistory) isEffect()    {}
func (effLookupSend) isEffect() {}
func (effStep) isEffect()       {}
func (effFlushAfter) isEffect() {}
func (effRunTool) isEffect()    {}
func (effCancelTurn) isEffect() {}
func (effOpened) isEffect()     {}
func (effStatus) isEffect()     {}
func (effFail) isEffect()       {}
func (effStop) isEffect()       {}
