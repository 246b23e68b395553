package llm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/tether-dev/tether/actor/engine"
)

// Tool is a tool the openai engine offers the model: the engine.Tool that
// runs it, and what the model is told about it.
type Tool struct {
	engine.Tool
	// Description tells the model what the tool does and when to use it.
	Description string
	// Parameters is the JSON schema of the arguments object; nil: none.
	Parameters map[string]any
}

// ToolSource offers the openai engine tools that may change while
// it runs: MCP servers' tools (package actor/engine/mcptools). Every step of
// every session asks it, concurrently.
type ToolSource interface {
	// OpenAITools returns the tools to offer the model now and, when some
	// cannot be offered (a server that cannot be reached), a sentence that
	// tells the model so, for the system prompt ("" when all can).
	OpenAITools() (tools []Tool, note string)
	// Tool returns the named tool: one OpenAITools offers, or one it
	// has left out since (a call asked for earlier, or one a crash cut
	// short, then fails with a reason rather than as an unknown tool).
	OpenAITool(name string) (Tool, bool)
}

// BuiltinToolsConfig configures the built-in tools.
type BuiltinToolsConfig struct {
	// SearchDelay is how long a search takes (it reports progress three
	// times along the way). Default 2s.
	SearchDelay time.Duration
	// Now is the clock get_time reads. Default time.Now.
	Now func() time.Time
}

// BuiltinTools are demo placeholders that run locally without a network,
// so that a real model's tool calls can be shown end to end: `search`
// (slow, idempotent, answering with canned placeholder results) and
// `get_time`. Real tools come from MCP servers (Config.ToolSource).
func BuiltinTools(cfg BuiltinToolsConfig) []Tool {
	if cfg.SearchDelay <= 0 {
		cfg.SearchDelay = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return []Tool{
		{
			Tool: engine.Tool{Name: "search", Idempotent: true, Run: func(ctx context.Context, args map[string]any, progress func(string)) (string, error) {
				return fakeSearch(ctx, cfg.SearchDelay, args, progress)
			}},
			Description: "Search the web for a query and return the top results. This is an offline demo: results are placeholders.",
			Parameters: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"query": map[string]any{"type": "string", "description": "what to search for"},
				},
				"required": []string{"query"},
			},
		},
		{
			Tool: engine.Tool{Name: "get_time", Idempotent: true, Run: func(_ context.Context, args map[string]any, _ func(string)) (string, error) {
				return getTime(cfg.Now(), args)
			}},
			Description: "Get the current date and time, in UTC or in an IANA time zone such as Europe/Paris.",
			Parameters: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"timezone": map[string]any{"type": "string", "description": "IANA time zone name; default UTC"},
				},
			},
		},
	}
}

// fakeSearch answers the same query with the same text, after delay.
func fakeSearch(ctx context.Context, delay time.Duration, args map[string]any, progress func(string)) (string, error) {
	q, _ := args["query"].(string)
	q = strings.TrimSpace(q)
	if q == "" {
		return "", errors.New(`search needs a non-empty "query" string`)
	}
	const sources = 3
	t := time.NewTimer(delay / sources)
	defer t.Stop()
	for i := 1; i <= sources; i++ {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
		}
		progress(fmt.Sprintf("searched %d of %d sources", i, sources))
		t.Reset(delay / sources)
	}
	h := fnv.New32a()
	h.Write([]byte(strings.ToLower(q)))
	n := h.Sum32()
	slug := strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(q), "-"), "-")
	var b strings.Builder
	fmt.Fprintf(&b, "Top results for %q (offline demo search, placeholder pages):\n", q)
	kinds := [...]string{"overview", "guide", "news", "discussion", "reference", "tutorial"}
	for i := range sources {
		fmt.Fprintf(&b, "%d. %s %s — https://example.com/%s/%d\n", i+1, q, kinds[(int(n)+i)%len(kinds)], slug, (n>>uint(i*8))&0xff)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

func getTime(now time.Time, args map[string]any) (string, error) {
	loc := time.UTC
	if tz, _ := args["timezone"].(string); tz != "" && tz != "UTC" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return "", fmt.Errorf("unknown time zone %q", tz)
		}
		loc = l
	}
	t := now.In(loc)
	return fmt.Sprintf("%s (%s, %s)", t.Format(time.RFC3339), t.Weekday(), loc), nil
}

// toolNameRE is what OpenAI accepts as a function name.
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// toolParams checks the tools and makes their declarations.
func toolParams(tools []Tool) (map[string]Tool, []openai.ChatCompletionToolUnionParam, error) {
	byName := make(map[string]Tool, len(tools))
	defs := make([]openai.ChatCompletionToolUnionParam, 0, len(tools))
	for _, t := range tools {
		switch {
		case !toolNameRE.MatchString(t.Name):
			return nil, nil, fmt.Errorf("actor: tool name %q: want 1-64 of a-z A-Z 0-9 _ -", t.Name)
		case t.Run == nil:
			return nil, nil, fmt.Errorf("actor: tool %q has no Run", t.Name)
		}
		if _, dup := byName[t.Name]; dup {
			return nil, nil, fmt.Errorf("actor: tool %q is offered twice", t.Name)
		}
		byName[t.Name] = t
		defs = append(defs, toolDef(t))
	}
	return byName, defs, nil
}

// toolDef is what the model is told about t.
func toolDef(t Tool) openai.ChatCompletionToolUnionParam {
	fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: t.Parameters}
	if t.Parameters == nil {
		fn.Parameters = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	if t.Description != "" {
		fn.Description = openai.String(t.Description)
	}
	return openai.ChatCompletionFunctionTool(fn)
}

// sourceTools are src's tools now, as declarations, less those whose
// name a built-in tool has or that are malformed (a source should make
// neither; a built-in keeps its name, so the model's calls stay what
// they were), and the source's note for the model.
func (o *Engine) sourceTools() ([]openai.ChatCompletionToolUnionParam, string) {
	tools, note := o.cfg.ToolSource.OpenAITools()
	defs := make([]openai.ChatCompletionToolUnionParam, 0, len(tools))
	for _, t := range tools {
		if _, builtin := o.tools[t.Name]; builtin || !toolNameRE.MatchString(t.Name) || t.Run == nil {
			o.log.Debug("tool source: tool left out", "tool", t.Name)
			continue
		}
		defs = append(defs, toolDef(t))
	}
	return defs, note
}
