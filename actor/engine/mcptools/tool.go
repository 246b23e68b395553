package mcptools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/engine/llm"
)

// Declare is what a tool's annotations make of its calls, as doc.go
// says: idempotent (run again after a crash) or needing approval
// (refused, never run). A tool without annotations takes the MCP
// defaults: not read-only, destructive, so it needs approval.
func Declare(a *mcp.ToolAnnotations) (idempotent, approval bool) {
	if a == nil {
		a = &mcp.ToolAnnotations{}
	}
	if a.ReadOnlyHint {
		return true, false
	}
	destructive := a.DestructiveHint == nil || *a.DestructiveHint
	return a.IdempotentHint, destructive
}

// approvalNote tells the model, in the description, what a call of a
// tool that needs approval will do.
const approvalNote = " (Needs the user's approval: a call waits for the user to approve or deny it, and a denied call does not run.)"

// openAITool is t as the engine offers it, under name.
func (s *server) openAITool(name string, t *mcp.Tool) llm.Tool {
	idempotent, approval := Declare(t.Annotations)
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if desc == "" && t.Annotations != nil {
		desc = t.Annotations.Title
	}
	if approval {
		desc = strings.TrimSpace(desc + approvalNote)
	}
	mcpName := t.Name
	return llm.Tool{
		Tool: engine.Tool{
			Name: name, Idempotent: idempotent, Approval: approval,
			Run: func(ctx context.Context, args map[string]any, progress func(string)) (string, error) {
				return s.call(ctx, mcpName, args, progress)
			},
		},
		Description: desc,
		Parameters:  schema(t.InputSchema),
	}
}

// schema is the tool's input schema as a JSON object; MCP requires one of
// type object, and anything else is sent as an object without properties.
func schema(in any) map[string]any {
	var m map[string]any
	if b, err := json.Marshal(in); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	if m == nil || m["type"] != "object" {
		return map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return m
}

// resultText is a call's result as the text the log keeps and the model
// reads: the text parts, a short line for each other part, or the
// structured result as JSON when there is nothing else; at most limit
// bytes.
func resultText(res *mcp.CallToolResult, limit int) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s: %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			switch r := c.Resource; {
			case r == nil:
			case r.Text != "":
				parts = append(parts, r.Text)
			default:
				parts = append(parts, fmt.Sprintf("[resource %s, %s, %d bytes]", r.URI, r.MIMEType, len(r.Blob)))
			}
		default:
			parts = append(parts, fmt.Sprintf("[%T]", c))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	text := strings.Join(parts, "\n")
	if len(text) > limit {
		cut := limit
		for cut > 0 && cut < len(text) && text[cut]&0xC0 == 0x80 {
			cut-- // not inside a UTF-8 sequence
		}
		text = fmt.Sprintf("%s\n[cut: %d bytes in all]", text[:cut], len(text))
	}
	return text
}
