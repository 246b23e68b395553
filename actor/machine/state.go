package machine

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/wal/record"
)

// ToolCall is the in-flight tool call of a session, with whatever partial
// result the tool has reported so far. It is kept in the session's state
// until the call's result is logged.
type ToolCall struct {
	CallID  string         `msgpack:"id"`
	Name    string         `msgpack:"n"`
	Args    map[string]any `msgpack:"a,omitempty"`
	Status  string         `msgpack:"s"`
	Partial string         `msgpack:"p,omitempty"`
	// StartedSeq is the seq of the tool's `started` entry; ReplyTo the seq
	// of the user entry whose turn made the call.
	StartedSeq uint64 `msgpack:"ss"`
	ReplyTo    uint64 `msgpack:"rt"`
	// Attempts counts runs after the first, made when a crash cut an
	// idempotent call short.
	Attempts int `msgpack:"at,omitempty"`
	// Idempotent is the call's own declaration (Call.Idempotent), for
	// engines that declare tools per call.
	Idempotent bool `msgpack:"i,omitempty"`
	// Sensitive: running the call marks the session sensitive (kept for
	// a call that runs only once it is approved).
	Sensitive bool `msgpack:"se,omitempty"`
}

// state is what the actor keeps of a session besides its header, context
// and entries: the schema of record.Header.State, owned by this package. It
// is small and bounded (turns are capped), so it is rewritten with every
// append.
type state struct {
	Pending *ToolCall `msgpack:"p,omitempty"`
	// Turns are the seqs of user entries the agent has not answered yet,
	// oldest first.
	Turns []uint64 `msgpack:"t,omitempty"`
	// Steps are the seqs of the finished tool entries of the turn in
	// progress (the one answering Turns[0]).
	Steps []uint64 `msgpack:"s,omitempty"`
}

// contexts is the schema of record.SessionData.Context: the user's context
// (preferences, current task goal) and the agent's. It is written only
// when it changes.
type contexts struct {
	User  map[string]any `msgpack:"u,omitempty"`
	Agent map[string]any `msgpack:"a,omitempty"`
}

func encodeState(s state) ([]byte, error) {
	if s.Pending == nil && len(s.Turns) == 0 && len(s.Steps) == 0 {
		return nil, nil
	}
	b, err := msgpack.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode session state: %w", err)
	}
	return b, nil
}

func decodeState(b []byte) (state, error) {
	var s state
	if len(b) == 0 {
		return s, nil
	}
	if err := record.Unmarshal(b, &s); err != nil {
		return state{}, fmt.Errorf("decode session state: %w", err)
	}
	return s, nil
}

func encodeContexts(c contexts) ([]byte, error) {
	b, err := msgpack.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode context: %w", err)
	}
	return b, nil
}

func decodeContexts(b []byte) (contexts, error) {
	var c contexts
	if len(b) == 0 {
		return c, nil
	}
	if err := record.Unmarshal(b, &c); err != nil {
		return contexts{}, fmt.Errorf("decode context: %w", err)
	}
	return c, nil
}

// Damage names the parts of a session's stored data that could not be
// decoded (nil when fine): the machine starts them afresh, and its next
// append rewrites them, so bad stored data never makes a session
// unreachable.
type Damage struct{ State, Context error }

// Stored is what a passive session shows, from its stored data alone:
// its View without messages.
func Stored(d record.SessionData) (View, Damage) {
	st, serr := decodeState(d.Header.State)
	cx, cerr := decodeContexts(d.Context)
	return View{Header: d.Header, Context: cx.User, AgentContext: cx.Agent, Pending: st.Pending, Turns: st.Turns}, Damage{State: serr, Context: cerr}
}

// HasWork reports whether the session whose header is h owes the agent a
// turn or a tool run (its state says so). A node that takes sessions over
// activates those at once.
func HasWork(h record.Header) bool {
	st, err := decodeState(h.State)
	return err == nil && (st.Pending != nil || len(st.Turns) > 0)
}
