package engine

import (
	"context"

	"github.com/tether-dev/tether/wal/record"
)

// Echo is the default engine: it answers every message at once.
type Echo struct{}

var _ Instant = Echo{}

// Next replies "Agent reply: <text>".
func (e Echo) Next(_ context.Context, in TurnInput) (Action, error) {
	return Action{Reply: e.Answer(in.User)}, nil
}

// Answer is "Agent reply: <text>".
func (Echo) Answer(user record.Entry) string { return "Agent reply: " + user.Content }

// Tool reports that echo has no tools.
func (Echo) Tool(string) (Tool, bool) { return Tool{}, false }
