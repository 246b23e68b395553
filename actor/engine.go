package actor

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tether-dev/tether/wal"
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
// endpoint (package actor/httpagent) names and declares a tool with each
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
	Answer(user wal.Entry) string
}

// TurnInput is what an engine sees.
type TurnInput struct {
	SessionID string
	// UserID is the session's user (the token's sub).
	UserID string
	// User is the user entry this turn answers.
	User wal.Entry
	// Steps are the tool entries already logged in this turn, oldest first.
	Steps []wal.Entry
	// History holds up to HistoryLen entries before User, oldest first.
	History []wal.Entry
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

// Echo is the default engine: it answers every message at once.
type Echo struct{}

var _ Instant = Echo{}

// Next replies "Agent reply: <text>".
func (e Echo) Next(_ context.Context, in TurnInput) (Action, error) {
	return Action{Reply: e.Answer(in.User)}, nil
}

// Answer is "Agent reply: <text>".
func (Echo) Answer(user wal.Entry) string { return "Agent reply: " + user.Content }

// Tool reports that echo has no tools.
func (Echo) Tool(string) (Tool, bool) { return Tool{}, false }

// DemoConfig configures the demo engine.
type DemoConfig struct {
	// SearchDelay is how long the search tool takes. Default 3s.
	SearchDelay time.Duration
	// SearchIdempotent declares the search tool idempotent, so a call cut
	// short by a crash is run again instead of being logged as failed.
	SearchIdempotent bool
	// StreamDelay paces the streamed reply: one part per word, this long
	// apart. 0 answers in one piece.
	StreamDelay time.Duration
}

// Demo answers through a slow `search` tool, through a `payment` tool
// (declared sensitive) when the message mentions paying, and through a
// `booking` tool that needs the user's approval when it mentions booking. It counts tool
// runs so tests can prove a call ran once.
type Demo struct {
	cfg  DemoConfig
	mu   sync.Mutex
	runs map[string]int
}

var _ Streamer = (*Demo)(nil)

// NewDemo returns a demo engine.
func NewDemo(cfg DemoConfig) *Demo {
	if cfg.SearchDelay <= 0 {
		cfg.SearchDelay = 3 * time.Second
	}
	return &Demo{cfg: cfg, runs: make(map[string]int)}
}

// Runs reports how many times the named tool has started running.
func (d *Demo) Runs(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runs[name]
}

func (d *Demo) count(name string) {
	d.mu.Lock()
	d.runs[name]++
	d.mu.Unlock()
}

// Next: first a tool call, then a reply built from the tool's result.
func (d *Demo) Next(_ context.Context, in TurnInput) (Action, error) {
	text := in.User.Content
	if len(in.Steps) == 0 {
		switch lower := strings.ToLower(text); {
		case strings.Contains(lower, "book"):
			return Action{Call: &Call{Name: "booking", Args: map[string]any{"request": text}}}, nil
		case strings.Contains(lower, "pay"):
			return Action{Call: &Call{Name: "payment", Args: map[string]any{"memo": text}}}, nil
		}
		return Action{Call: &Call{Name: "search", Args: map[string]any{"query": text}}}, nil
	}
	last := in.Steps[len(in.Steps)-1]
	name, _ := last.Metadata["name"].(string)
	switch status, _ := last.Metadata["status"].(string); status {
	case ToolFailed:
		return Action{Reply: fmt.Sprintf("The %s for %q did not finish (%s); ask again if you still need it.", name, text, last.Content)}, nil
	case ToolDenied:
		return Action{Reply: fmt.Sprintf("You declined the %s, so nothing was done for %q.", name, text)}, nil
	}
	switch name {
	case "payment":
		return Action{Reply: "Payment done: " + last.Content}, nil
	case "booking":
		return Action{Reply: "Booked: " + last.Content}, nil
	}
	return Action{
		Reply:        fmt.Sprintf("I searched for %q. %s", text, last.Content),
		AgentContext: map[string]any{"last_query": text},
	}, nil
}

// Stream is Next with the reply written word by word, StreamDelay apart.
func (d *Demo) Stream(ctx context.Context, in TurnInput, part func(string)) (Action, error) {
	act, err := d.Next(ctx, in)
	if err != nil || act.Call != nil || d.cfg.StreamDelay <= 0 {
		return act, err
	}
	for i, w := range strings.SplitAfter(act.Reply, " ") {
		if w == "" {
			continue
		}
		if i > 0 {
			select {
			case <-ctx.Done():
				return Action{}, ctx.Err()
			case <-time.After(d.cfg.StreamDelay):
			}
		}
		part(w)
	}
	return act, nil
}

// Tool returns search, payment or booking.
func (d *Demo) Tool(name string) (Tool, bool) {
	switch name {
	case "booking":
		return Tool{Name: name, Approval: true, Run: d.booking}, true
	case "search":
		return Tool{Name: name, Idempotent: d.cfg.SearchIdempotent, Run: d.search}, true
	case "payment":
		return Tool{Name: name, Sensitive: true, Run: d.payment}, true
	}
	return Tool{}, false
}

func (d *Demo) search(ctx context.Context, args map[string]any, progress func(string)) (string, error) {
	d.count("search")
	q, _ := args["query"].(string)
	const sources = 3
	for i := 1; i <= sources; i++ {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(d.cfg.SearchDelay / sources):
		}
		progress(fmt.Sprintf("searched %d of %d sources", i, sources))
	}
	return fmt.Sprintf("Found %d results for %q.", sources, q), nil
}

func (d *Demo) booking(ctx context.Context, args map[string]any, _ func(string)) (string, error) {
	d.count("booking")
	req, _ := args["request"].(string)
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(d.cfg.SearchDelay / 3):
	}
	return fmt.Sprintf("confirmation for %q", req), nil
}

func (d *Demo) payment(ctx context.Context, args map[string]any, _ func(string)) (string, error) {
	d.count("payment")
	memo, _ := args["memo"].(string)
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(d.cfg.SearchDelay / 3):
	}
	return fmt.Sprintf("receipt for %q", memo), nil
}
