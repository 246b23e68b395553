package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

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
	name, _ := last.Metadata[MetaName].(string)
	switch status, _ := last.Metadata[MetaStatus].(string); status {
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
