package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/wal"
)

// A long History: the request holds the newest entries that fit the
// budget, and the system message says what stands in for the rest.
func TestOpenAIHistoryBudget(t *testing.T) {
	leakCheck(t)
	f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ fakeRequest) { streamText(w, "ok") })
	const budget = 5000
	e := newTestOpenAI(t, f, nil, func(c *Config) { c.MaxHistoryBytes = budget })

	pad := strings.Repeat("x", 1000)
	in := engine.TurnInput{SessionID: "s1", Summary: "7 earlier entries (seq 1–7) are not shown."}
	for i := range engine.HistoryLen {
		role := engine.RoleUser
		if i%2 == 1 {
			role = engine.RoleAgent
		}
		in.History = append(in.History, wal.Entry{Seq: uint64(8 + i), Role: role, Content: fmt.Sprintf("entry-%02d %s", i, pad)})
	}
	in.User = wal.Entry{Seq: 8 + engine.HistoryLen, Role: engine.RoleUser, Content: "the question " + pad + pad + pad}
	if _, _, err := streamIn(t, e, in); err != nil {
		t.Fatal(err)
	}
	r := f.requests()[0]
	m := r.Body.Messages
	// 1016 bytes each: four fit in 5000.
	if len(m) != 1+4+1 || m[0].Role != "system" || m[len(m)-1].text() != in.User.Content {
		t.Fatalf("%d messages: %s", len(m), r.Raw)
	}
	for i, msg := range m[1:5] {
		if want := fmt.Sprintf("entry-%02d ", 16+i); !strings.HasPrefix(msg.text(), want) {
			t.Fatalf("message %d is %.10q, want %q", i+1, msg.text(), want)
		}
	}
	for i := range 16 {
		if strings.Contains(string(r.Raw), fmt.Sprintf("entry-%02d ", i)) {
			t.Fatalf("entry %d, older than the budget allows, was sent", i)
		}
	}
	sys := m[0].text()
	if !strings.HasPrefix(sys, DefaultOpenAISystem) || !strings.Contains(sys, in.Summary) ||
		!strings.Contains(sys, "A further 16 earlier entries were left out") {
		t.Fatalf("system message %q", sys)
	}
	// The user entry is always sent, however long.
	if len(r.Raw) > budget+len(in.User.Content)+len(DefaultOpenAISystem)+2000 {
		t.Fatalf("request of %d bytes", len(r.Raw))
	}

	// A short history goes whole, with no note when nothing is left out.
	in.History, in.Summary = in.History[18:], ""
	in.History[0].Content, in.History[1].Content = "short q", "short a"
	if _, _, err := streamIn(t, e, in); err != nil {
		t.Fatal(err)
	}
	m = f.requests()[1].Body.Messages
	if len(m) != 4 || m[0].text() != DefaultOpenAISystem || m[1].text() != "short q" || m[2].Role != "assistant" {
		t.Fatalf("short history: %s", f.requests()[1].Raw)
	}
}

// Earlier turns' tool calls are sent as call + result pairs, even when a
// user entry was logged between the two; system notices are not sent.
func TestOpenAIConversationFromLog(t *testing.T) {
	e, err := New(Config{BaseURL: "http://127.0.0.1:9/v1", Model: "m", System: "S"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tool := func(seq uint64, status, content string, md map[string]any) wal.Entry {
		m := map[string]any{"call_id": "call-2", "name": "search", "status": status, "reply_to": uint64(1)}
		for k, v := range md {
			m[k] = v
		}
		return wal.Entry{Seq: seq, Role: engine.RoleTool, Content: content, Metadata: m}
	}
	in := engine.TurnInput{
		History: []wal.Entry{
			{Seq: 1, Role: engine.RoleUser, Content: "find go"},
			// Decoded from the log, args may be keyed by any.
			tool(2, engine.ToolStarted, "", map[string]any{"args": map[any]any{"query": "go", "n": int8(2)}}),
			{Seq: 3, Role: engine.RoleUser, Content: "and quickly"},
			tool(4, engine.ToolCompleted, "found go", map[string]any{"result": "found go"}),
			{Seq: 5, Role: engine.RoleAgent, Content: "Go is a language."},
			{Seq: 6, Role: engine.RoleSystem, Content: "agent error: the model did not finish within 2m"},
		},
		User: wal.Entry{Seq: 7, Role: engine.RoleUser, Content: "thanks"},
		// This turn's outcome without its started entry: the arguments
		// are unknown and sent as {}.
		Steps: []wal.Entry{{Seq: 9, Role: engine.RoleTool, Content: "2025-06-01T12:00:00Z",
			Metadata: map[string]any{"call_id": "call-8", "name": "get_time", "status": engine.ToolCompleted}}},
	}
	msgs, kept := e.conversation(in, "")
	if kept != len(in.History) {
		t.Fatalf("kept %d", kept)
	}
	raw, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	var m []fakeMsg
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range m {
		s := x.Role + ":" + x.text()
		if len(x.ToolCalls) > 0 {
			c := x.ToolCalls[0]
			s += fmt.Sprintf("call(%s %s %s)", c.ID, c.Function.Name, c.Function.Arguments)
		}
		if x.ToolCallID != "" {
			s += "@" + x.ToolCallID
		}
		got = append(got, s)
	}
	want := []string{
		"system:S", "user:find go", "user:and quickly",
		`assistant:call(call-2 search {"n":2,"query":"go"})`, "tool:found go@call-2",
		"assistant:Go is a language.", "user:thanks",
		"assistant:call(call-8 get_time {})", "tool:2025-06-01T12:00:00Z@call-8",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("conversation\n got %q\nwant %q", got, want)
	}
}

func TestOpenAIBuiltinTools(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 30, 0, 0, time.UTC)
	tools := BuiltinTools(BuiltinToolsConfig{SearchDelay: 30 * time.Millisecond, Now: func() time.Time { return now }})
	e, err := New(Config{BaseURL: "http://127.0.0.1:9/v1", Model: "m", Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	search, ok := e.Tool("search")
	if !ok || !search.Idempotent || search.Sensitive {
		t.Fatalf("search %+v", search)
	}
	var progress []string
	r1, err := search.Run(context.Background(), map[string]any{"query": "Go generics"}, func(p string) { progress = append(progress, p) })
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := search.Run(context.Background(), map[string]any{"query": "Go generics"}, func(string) {})
	r3, _ := search.Run(context.Background(), map[string]any{"query": "pebble"}, func(string) {})
	if r1 != r2 || r1 == r3 || !strings.Contains(r1, `"Go generics"`) || len(progress) != 3 {
		t.Fatalf("search: %q / %q / %q, progress %q", r1, r2, r3, progress)
	}
	if _, err := search.Run(context.Background(), map[string]any{}, func(string) {}); err == nil {
		t.Fatal("search without a query succeeded")
	}
	slow := BuiltinTools(BuiltinToolsConfig{SearchDelay: time.Hour})[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := slow.Run(ctx, map[string]any{"query": "q"}, func(string) {}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled search: %v", err)
	}

	gt, ok := e.Tool("get_time")
	if !ok {
		t.Fatal("no get_time")
	}
	if got, err := gt.Run(context.Background(), map[string]any{}, nil); err != nil || got != "2025-06-01T12:30:00Z (Sunday, UTC)" {
		t.Fatalf("get_time: %q, %v", got, err)
	}
	if _, err := gt.Run(context.Background(), map[string]any{"timezone": "Nowhere/Atlantis"}, nil); err == nil {
		t.Fatal("unknown zone accepted")
	}
	if _, ok := e.Tool("payment"); ok {
		t.Fatal("a tool that is not offered")
	}
}
