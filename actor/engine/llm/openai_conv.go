package llm

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/wal"
)

// conversation builds the messages of a request from in: the system
// prompt, the newest History entries that fit MaxHistoryBytes, the user
// entry and this turn's tool steps. What is left out is described in the
// system message (TurnInput.Summary and how many entries the budget
// dropped), and so is note (the tool source's word on tools it cannot
// offer now). It returns the messages and how many History entries it
// kept.
func (o *Engine) conversation(in engine.TurnInput, note string) ([]openai.ChatCompletionMessageParamUnion, int) {
	args := callArgsByID(in.History, in.Steps)
	keep := historySuffix(in.History, args, o.cfg.MaxHistoryBytes)
	dropped := len(in.History) - len(keep)

	// One leading system message: many local chat templates accept no
	// other, so the note about what is left out joins the prompt.
	system := o.cfg.System
	if in.Summary != "" || dropped > 0 {
		system += "\n\nEarlier parts of this conversation are not shown to you."
		if in.Summary != "" {
			system += " " + in.Summary
		}
		if dropped > 0 {
			system += fmt.Sprintf(" A further %d earlier entries were left out to fit the history budget.", dropped)
		}
	}
	if note != "" {
		system += "\n\n" + note
	}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system)}
	for _, e := range keep {
		msgs = append(msgs, entryMessages(e, args)...)
	}
	msgs = append(msgs, openai.UserMessage(in.User.Content))
	for _, e := range in.Steps {
		msgs = append(msgs, entryMessages(e, args)...)
	}
	return msgs, len(keep)
}

// historySuffix returns the newest entries of hist whose rendered size
// fits budget. It stops at the first that does not fit: a conversation
// with a hole in it would mislead the model more than a shorter one.
func historySuffix(hist []wal.Entry, args map[string]string, budget int) []wal.Entry {
	used := 0
	i := len(hist)
	for ; i > 0; i-- {
		n := entryCost(hist[i-1], args)
		if used+n > budget {
			break
		}
		used += n
	}
	return hist[i:]
}

// entryCost approximates the bytes an entry adds to a request.
func entryCost(e wal.Entry, args map[string]string) int {
	const overhead = 16 // role, quotes, separators
	switch {
	case e.Role == engine.RoleSystem:
		return 0 // not sent
	case e.Role == engine.RoleTool && !toolOutcome(mdStr(e, "status")):
		return 0 // sent with its result
	case e.Role == engine.RoleTool:
		return overhead*2 + len(e.Content) + len(mdStr(e, "name")) + len(args[mdStr(e, "call_id")])
	}
	return overhead + len(e.Content)
}

// entryMessages renders one log entry. A tool call is rendered where its
// outcome is — the assistant's tool call and the tool's message must be
// adjacent, and a user entry may have been logged between a call's start
// and its end — so started entries render as nothing. System entries
// (notices to the user, such as agent errors) are not the conversation.
func entryMessages(e wal.Entry, args map[string]string) []openai.ChatCompletionMessageParamUnion {
	switch e.Role {
	case engine.RoleUser:
		return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(e.Content)}
	case engine.RoleAgent:
		if e.Content == "" {
			return nil
		}
		return []openai.ChatCompletionMessageParamUnion{openai.AssistantMessage(e.Content)}
	case engine.RoleTool:
		status := mdStr(e, "status")
		if !toolOutcome(status) {
			return nil
		}
		id := toolCallID(e)
		a, ok := args[id]
		if !ok {
			a = "{}"
		}
		call := openai.ChatCompletionAssistantMessageParam{
			ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: id,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name: mdStr(e, "name"), Arguments: a,
					},
				},
			}},
		}
		result := e.Content
		switch status {
		case engine.ToolFailed:
			result = "The tool call failed: " + result
		case engine.ToolDenied:
			result = "The user denied this tool call; it did not run."
		}
		return []openai.ChatCompletionMessageParamUnion{
			{OfAssistant: &call},
			openai.ToolMessage(result, id),
		}
	}
	return nil
}

// toolOutcome reports whether a tool entry with this status ends its
// call (completed, failed, denied): the one a call is rendered at.
func toolOutcome(status string) bool {
	return status == engine.ToolCompleted || status == engine.ToolFailed || status == engine.ToolDenied
}

// toolCallID is the id a call and its result share in a request: the
// actor's call_id. The model's own id is not journaled, and need not be:
// the model only needs the two to match.
func toolCallID(e wal.Entry) string {
	if id := mdStr(e, "call_id"); id != "" {
		return id
	}
	return fmt.Sprintf("call-%d", e.Seq)
}

// callArgsByID maps each call_id to its arguments as JSON, from the
// started entries among the given ones.
func callArgsByID(lists ...[]wal.Entry) map[string]string {
	out := make(map[string]string)
	for _, list := range lists {
		for _, e := range list {
			if st := mdStr(e, "status"); e.Role != engine.RoleTool || st != engine.ToolStarted && st != engine.ToolAwaitingApproval {
				continue
			}
			b, err := json.Marshal(jsonable(e.Metadata[engine.MetaArgs]))
			if err != nil || string(b) == "null" {
				b = []byte("{}")
			}
			out[toolCallID(e)] = string(b)
		}
	}
	return out
}

// jsonable turns what a log decode may hold (maps keyed by any) into
// values encoding/json takes.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = jsonable(x)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[fmt.Sprint(k)] = jsonable(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = jsonable(x)
		}
		return out
	}
	return v
}

// toolCall makes the model's call an Action's: a name and a JSON object
// of arguments (no arguments is an empty object).
func toolCall(name, arguments string) (*engine.Call, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: no tool name", ErrBadToolCall)
	}
	args := map[string]any{}
	if a := strings.TrimSpace(arguments); a != "" && a != "null" {
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			return nil, fmt.Errorf("%w: %s with arguments that are not a JSON object (%q): %v",
				ErrBadToolCall, name, engine.Clip(a, 120), err)
		}
		if args == nil {
			args = map[string]any{}
		}
	}
	return &engine.Call{Name: name, Args: args}, nil
}

func mdStr(e wal.Entry, key string) string {
	s, _ := e.Metadata[key].(string)
	return s
}
