package engine

import (
	"context"

	"github.com/tether-dev/tether/wal/record"
)

// Engine is an agent: given a turn so far it decides the next step. It
// must keep no per-session state of its own between calls — everything it
// needs is in TurnInput, which the actor builds from the session's memory
// and log — so that a turn can go on after a disconnect, a passivation or
// a crash. An engine that can show its replies as they are written also
// implements Streamer.
type Engine interface {
	// Next returns the next step of the turn that answers in.User: a final
	// reply, or a tool call whose result the next call will see in
	// in.Steps. It may take long (a model call); ctx ends it on shutdown.
	Next(ctx context.Context, in TurnInput) (Action, error)
	// Tool returns the named tool, if this engine offers it.
	Tool(name string) (Tool, bool)
}

// Streamer is an Engine whose replies can be shown as they are written:
// Stream is Next, but it reports the text of a reply as it produces it,
// one part at a time (each part non-empty, carrying its own spaces), before
// returning the Action. The Action's Reply is the whole reply: it must
// begin with the parts joined, in order (the parts are a preview of it,
// and the actor logs Reply). A tool call may follow text: the text
// streamed so far is then logged as the agent's entry before the call.
// part must not be called after Stream returns.
type Streamer interface {
	Engine
	Stream(ctx context.Context, in TurnInput, part func(text string)) (Action, error)
}

// CallRunner is an Engine whose tools are not known ahead: an agent
// endpoint (package actor/engine/httpagent) names and declares a tool with each
// call. The actor runs every call of such an engine through RunCall, not
// through Tool(name).Run, because the run needs to say which session and
// which call it is (an endpoint keys its idempotency on them). Tool may
// then report no tools at all: a call's Idempotent and Sensitive say what
// Tool's declaration would.
type CallRunner interface {
	Engine
	RunCall(ctx context.Context, c CallInput, progress func(string)) (string, error)
}

// CallInput is the tool call a CallRunner runs: the call as the engine
// asked for it, with the ids the actor gave it.
type CallInput struct {
	SessionID, UserID string
	// CallID is the call's id in the log (metadata.call_id), the same on
	// a re-run after a crash.
	CallID string
	Name   string
	Args   map[string]any
	// Idempotent is the call's declaration (Call.Idempotent): whether it
	// may be sent again when it is not known to have reached its tool.
	Idempotent bool
	// Attempt is 0 for the first run, 1 for the re-run of an idempotent
	// call that a crash cut short.
	Attempt int
}

// Instant is an engine whose reply is a pure function of the user's
// message, known at once (Echo): the actor stores the reply in the same
// atomic append as the message, so the pair costs one fsync and reaches
// the client in one write. Answer must not block or have side effects.
type Instant interface {
	Engine
	Answer(user record.Entry) string
}

// TurnInput is what an engine sees.
type TurnInput struct {
	SessionID string
	// UserID is the session's user (the token's sub).
	UserID string
	// User is the user entry this turn answers.
	User record.Entry
	// Steps are the tool entries already logged in this turn, oldest first.
	Steps []record.Entry
	// History holds up to HistoryLen entries before User, oldest first.
	History []record.Entry
	// Summary describes the entries before History, when there are any
	// (how many, and how they began): what stands in for a conversation
	// longer than an engine is shown.
	Summary      string
	Context      map[string]any
	AgentContext map[string]any
}

// HistoryLen is how many earlier entries an engine is shown.
const HistoryLen = 20

// Action is an engine's decision. Exactly one of Reply and Call is set.
type Action struct {
	Reply string
	Call  *Call
	// AgentContext keys are merged into the session's agent context.
	AgentContext map[string]any
}

// Call asks for a tool run. An engine whose tools are declared with
// Tool leaves the flags false; one whose tools are declared per call (a
// CallRunner) sets them: either declaration counts.
type Call struct {
	Name string
	Args map[string]any
	// Idempotent: a run a crash cut short may be run again (kept with the
	// pending call, so the declaration outlives the process).
	Idempotent bool
	// Sensitive: running the call marks the session sensitive.
	Sensitive bool
	// Approval: the call must be approved by the user before it runs.
	// It is logged awaiting_approval and the turn waits, in the log, for
	// an approve (PROTOCOL.md); a denied call never runs, and the next
	// step sees its denied entry.
	Approval bool
}

// Tool is something an agent can run. Idempotent tools may be run again
// when a crash left their call unfinished; others are logged as failed.
// Running a Sensitive tool marks the session sensitive. An Approval tool
// must be approved by the user before each run, as Call.Approval says.
type Tool struct {
	Name       string
	Idempotent bool
	Sensitive  bool
	Approval   bool
	// Run does the work. progress reports an intermediate result, which is
	// kept in the session's pending tool call.
	Run func(ctx context.Context, args map[string]any, progress func(string)) (string, error)
}
