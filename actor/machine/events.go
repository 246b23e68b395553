package machine

import (
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/wal/record"
)

// Event is something that happens to a session: one of the types below.
// The set is sealed (isEvent is unexported) so Step can switch over all
// of them, and an event no case knows is a bug it reports, never silence.
type Event interface{ isEvent() }

// What a client asks for, through its connection. A request from a
// connection that is not attached (superseded, detached) changes nothing.
type (
	// Attach is a hello: a resume of the session or, with NewReason set,
	// the first attach of a new one. The answer goes to Reply (capacity
	// 1) as an Opened.
	Attach struct {
		Conn     Conn
		UserID   string
		LastSeq  uint64
		AuthTime time.Time
		// Stream is the part of a streamed reply the client holds.
		Stream    *StreamMark
		NewReason string
		// Shared keeps the connections already attached.
		Shared bool
		Reply  chan<- Opened
	}
	// Detach is a connection gone.
	Detach struct{ Conn Conn }
	// Send is a user message, with the client's id for it.
	Send struct {
		Conn     Conn
		ID       string
		Content  string
		Metadata map[string]any
		// Interrupt cancels the running turn before this send's.
		Interrupt bool
	}
	// Cancel stops the turn answering ReplyTo (0: the running one).
	Cancel struct {
		Conn    Conn
		ReplyTo uint64
	}
	// Approve is the user's decision on a call awaiting approval.
	Approve struct {
		Conn     Conn
		CallID   string
		Approved bool
	}
	// SetContext merges keys into the user context (nil deletes one).
	SetContext struct {
		Conn Conn
		Set  map[string]any
	}
	// Complete ends the session for good.
	Complete struct{ Conn Conn }
	// HistoryRequest asks for a page of entries before Before (0: the
	// newest), at most Limit (0: DefaultHistoryLimit).
	HistoryRequest struct {
		Conn   Conn
		Before uint64
		Limit  int
	}
)

// What the runner reports back: the answers to the effects it carried
// out, and the engine's and the tools' words.
type (
	// Start: the session was just activated; resume half-done work.
	Start struct{}
	// Recover brings a session a previous run left up to date at boot (or
	// one whose actor failed with a client attached): Boot is now,
	// LastAlive the last moment that run was known alive.
	Recover struct{ Boot, LastAlive time.Time }
	// SendChecked is the store's answer to LookupSend.
	SendChecked struct {
		Send  Send
		Seq   uint64
		Found bool
	}
	// StepDone is the engine's decision for step Step of the turn
	// answering UserSeq, or the error it failed with.
	StepDone struct {
		Step    uint64 // of the RunStep it answers
		UserSeq uint64
		Action  engine.Action
		Err     error
	}
	// Part is text of the reply a streaming engine is writing.
	Part struct {
		Step uint64
		Text string
	}
	// Flush: the flush interval after the last delta has passed.
	Flush struct{}
	// ToolDone is a tool run's outcome.
	ToolDone struct {
		CallID string
		Result string
		Err    error
	}
	// ToolProgress is a tool's intermediate result.
	ToolProgress struct {
		CallID  string
		Partial string
	}
	// Appended: the journal finished append ID (and every one before).
	Appended struct {
		ID  uint64
		Err error
	}
	// Tick: a deadline (window end, passivation) may have come.
	Tick struct{}
	// Shutdown: the node is stopping, or the session moves away.
	Shutdown struct{}
	// Rejoin attaches again, without a word to them, the connections a
	// Hibernate kept, shown everything up to LastSeq. It is the first
	// event of the activation that wakes the session.
	Rejoin struct {
		Conns   []Conn
		LastSeq uint64
	}
	// Query asks for what the session shows (the HTTP snapshot), answered
	// on Reply (capacity 1) by a Report effect.
	Query struct{ Reply chan<- View }
)

func (Attach) isEvent()         {}
func (Detach) isEvent()         {}
func (Send) isEvent()           {}
func (Cancel) isEvent()         {}
func (Approve) isEvent()        {}
func (SetContext) isEvent()     {}
func (Complete) isEvent()       {}
func (HistoryRequest) isEvent() {}
func (Start) isEvent()          {}
func (Recover) isEvent()        {}
func (SendChecked) isEvent()    {}
func (StepDone) isEvent()       {}
func (Part) isEvent()           {}
func (Flush) isEvent()          {}
func (ToolDone) isEvent()       {}
func (ToolProgress) isEvent()   {}
func (Appended) isEvent()       {}
func (Tick) isEvent()           {}
func (Shutdown) isEvent()       {}
func (Rejoin) isEvent()         {}
func (Query) isEvent()          {}

// Opened answers an Attach: the reason, or Err for a refusal that changes
// nothing (reauth, bad last_seq, not resumable, too many connections).
type Opened struct {
	Reason string
	Err    error
}

// View is a session as a reader sees it: what is durable of it.
type View struct {
	// Header has LastSeq at the newest durable entry.
	Header       record.Header
	Context      map[string]any
	AgentContext map[string]any
	Pending      *ToolCall
	// Turns are the seqs of the user entries the agent owes an answer.
	Turns []uint64
	// Messages are the newest ReplayLimit entries.
	Messages Span
}
