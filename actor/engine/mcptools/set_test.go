package mcptools

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine/llm"
	"github.com/tether-dev/tether/actor/engine/mcptools/mcptest"
)

// Every test closes its Set: goleak fails the package if a server's loop,
// a session or a connection of one is left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait on a condition.
const waitTimeout = 20 * time.Second

// newSet starts a Set on servers, retrying fast; it is closed when the
// test ends (before the servers, which were started earlier).
func newSet(t *testing.T, mod func(*Config), servers ...Server) *Set {
	t.Helper()
	cfg := Config{Servers: servers, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func text(s string) mcptest.Handler {
	return func(context.Context, map[string]any, int) (*mcp.CallToolResult, error) { return mcptest.Text(s), nil }
}

func names(s *Set) []string {
	tools, _ := s.OpenAITools()
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func offered(s *Set, name string) (llm.Tool, bool) {
	tools, _ := s.OpenAITools()
	for _, t := range tools {
		if t.Name == name {
			return t, true
		}
	}
	return llm.Tool{}, false
}

func run(t *testing.T, tool llm.Tool, args map[string]any) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	return tool.Run(ctx, args, func(string) {})
}

func TestDeclare(t *testing.T) {
	for _, c := range []struct {
		name             string
		ann              *mcp.ToolAnnotations
		idempotent, appr bool
	}{
		{"no annotations: the defaults, destructive", nil, false, true},
		{"read-only", &mcp.ToolAnnotations{ReadOnlyHint: true}, true, false},
		{"read-only, destructive ignored", &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: mcptest.Bool(true)}, true, false},
		{"idempotent, destructive by default", &mcp.ToolAnnotations{IdempotentHint: true}, true, true},
		{"idempotent, not destructive", &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: mcptest.Bool(false)}, true, false},
		{"not destructive", &mcp.ToolAnnotations{DestructiveHint: mcptest.Bool(false)}, false, false},
		{"destructive", &mcp.ToolAnnotations{DestructiveHint: mcptest.Bool(true)}, false, true},
	} {
		if i, a := Declare(c.ann); i != c.idempotent || a != c.appr {
			t.Errorf("%s: idempotent %v approval %v, want %v %v", c.name, i, a, c.idempotent, c.appr)
		}
	}
}

// A server's tools are offered with what their annotations say, under
// names OpenAI accepts; one named like a reserved (built-in) tool takes
// the server's name before its own.
func TestToolsListed(t *testing.T) {
	srv := mcptest.Start(t, "files")
	srv.Tool("read", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("r"))
	srv.Tool("put", &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: mcptest.Bool(false)}, text("p"))
	srv.Tool("delete", &mcp.ToolAnnotations{DestructiveHint: mcptest.Bool(true)}, text("d"))
	srv.Tool("append", &mcp.ToolAnnotations{DestructiveHint: mcptest.Bool(false)}, text("a"))
	srv.Tool("bare", nil, text("b"))
	srv.Tool("dir.list", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("l"))
	srv.Tool("search", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("s"))
	s := newSet(t, func(c *Config) { c.Reserved = []string{"search", "get_time"} }, Server{Name: "files", URL: srv.URL})

	tools, note := s.OpenAITools()
	if note != "" {
		t.Fatalf("note %q with the server up", note)
	}
	want := map[string][2]bool{ // idempotent, approval
		"read": {true, false}, "put": {true, false}, "delete": {false, true}, "append": {false, false},
		"bare": {false, true}, "dir_list": {true, false}, "files_search": {true, false},
	}
	if len(tools) != len(want) {
		t.Fatalf("tools %v", names(s))
	}
	for _, tool := range tools {
		w, ok := want[tool.Name]
		if !ok || tool.Idempotent != w[0] || tool.Approval != w[1] || tool.Sensitive {
			t.Errorf("%s: idempotent %v approval %v sensitive %v, want %v", tool.Name, tool.Idempotent, tool.Approval, tool.Sensitive, w)
		}
		if strings.Contains(tool.Description, "approval") != w[1] || !strings.HasPrefix(tool.Description, "test tool ") {
			t.Errorf("%s: description %q", tool.Name, tool.Description)
		}
		if tool.Parameters["type"] != "object" || tool.Parameters["properties"] == nil {
			t.Errorf("%s: parameters %v", tool.Name, tool.Parameters)
		}
		if got, ok := s.OpenAITool(tool.Name); !ok || got.Name != tool.Name {
			t.Errorf("OpenAITool(%s) = %v", tool.Name, ok)
		}
	}
	if res, err := run(t, want2(t, s, "dir_list"), nil); err != nil || res != "l" || srv.Calls("dir.list") != 1 {
		t.Fatalf("dir_list: %q %v, %d calls of dir.list", res, err, srv.Calls("dir.list"))
	}
	if _, ok := s.OpenAITool("search"); ok {
		t.Fatal("the reserved name is taken")
	}
}

func want2(t *testing.T, s *Set, name string) llm.Tool {
	t.Helper()
	tool, ok := offered(s, name)
	if !ok {
		t.Fatalf("%s not offered; tools %v", name, names(s))
	}
	return tool
}

// Two servers offering one name: each is offered as SERVER_NAME, and a
// call goes to its own server.
func TestNamesAcrossServers(t *testing.T) {
	one, two := mcptest.Start(t, "one"), mcptest.Start(t, "two")
	one.Tool("lookup", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("from one"))
	two.Tool("lookup", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("from two"))
	two.Tool("only", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("only"))
	s := newSet(t, nil, Server{Name: "one", URL: one.URL}, Server{Name: "two", URL: two.URL})
	if got := names(s); !slices.Equal(got, []string{"one_lookup", "two_lookup", "only"}) {
		t.Fatalf("tools %v", got)
	}
	if res, err := run(t, want2(t, s, "two_lookup"), nil); err != nil || res != "from two" || one.Calls("lookup") != 0 || two.Calls("lookup") != 1 {
		t.Fatalf("two_lookup: %q %v; calls %d %d", res, err, one.Calls("lookup"), two.Calls("lookup"))
	}
}

// notifications/tools/list_changed: a tool added is offered, one removed
// is not, and a call of it says why.
func TestListChanged(t *testing.T) {
	srv := mcptest.Start(t, "s")
	srv.Tool("a", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("a"))
	s := newSet(t, nil, Server{Name: "s", URL: srv.URL})
	if got := names(s); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("tools %v", got)
	}
	srv.Tool("b", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("b"))
	actortest.Eventually(t, "b offered", func() bool { return slices.Equal(names(s), []string{"a", "b"}) })
	if res, err := run(t, want2(t, s, "b"), nil); err != nil || res != "b" {
		t.Fatalf("b: %q %v", res, err)
	}
	srv.RemoveTools("a")
	actortest.Eventually(t, "a no longer offered", func() bool { return slices.Equal(names(s), []string{"b"}) })
	gone, ok := s.OpenAITool("a")
	if !ok {
		t.Fatal("a removed tool is unknown")
	}
	if _, err := run(t, gone, nil); err == nil || !strings.Contains(err.Error(), "no longer offers the tool a") {
		t.Fatalf("call of a removed tool: %v", err)
	}
}

// freeAddr is a 127.0.0.1 address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A server down at start is no error: its tools are not offered, the
// note names it, and once it comes up its tools are offered.
func TestServerDownAtStart(t *testing.T) {
	addr := freeAddr(t)
	up := mcptest.Start(t, "up")
	up.Tool("ping_up", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("pong"))
	start := time.Now()
	s := newSet(t, nil, Server{Name: "up", URL: up.URL}, Server{Name: "late", URL: "http://" + addr + "/mcp"})
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("New took %v with a server refusing connections", took)
	}
	tools, note := s.OpenAITools()
	if len(tools) != 1 || tools[0].Name != "ping_up" || !strings.Contains(note, "cannot be reached") || !strings.Contains(note, "late") ||
		strings.Contains(note, "up,") {
		t.Fatalf("tools %v, note %q", names(s), note)
	}
	late := mcptest.StartAt(t, "late", addr)
	late.Tool("later", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("here now"))
	actortest.Eventually(t, "the late server's tools", func() bool {
		_, note := s.OpenAITools()
		return slices.Equal(names(s), []string{"ping_up", "later"}) && note == ""
	})
	if res, err := run(t, want2(t, s, "later"), nil); err != nil || res != "here now" {
		t.Fatalf("later: %q %v", res, err)
	}
}

// A server that goes away: a call fails saying it is unavailable, its
// tools are left out (and the note names it) until it is back.
func TestServerGoesAway(t *testing.T) {
	srv := mcptest.Start(t, "s")
	srv.Tool("look", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("seen"))
	addr := srv.Addr()
	s := newSet(t, nil, Server{Name: "s", URL: srv.URL})
	look := want2(t, s, "look")
	srv.Close()
	if _, err := run(t, look, nil); err == nil || !strings.Contains(err.Error(), "MCP server s is unavailable") {
		t.Fatalf("call with the server gone: %v", err)
	}
	actortest.Eventually(t, "the tools left out", func() bool {
		_, note := s.OpenAITools()
		return len(names(s)) == 0 && strings.Contains(note, ": s.")
	})
	if known, ok := s.OpenAITool("look"); !ok {
		t.Fatal("look unknown while its server is down")
	} else if _, err := run(t, known, nil); err == nil || !strings.Contains(err.Error(), "MCP server s is unavailable") {
		t.Fatalf("call of a left-out tool: %v", err)
	}
	back := mcptest.StartAt(t, "s", addr)
	back.Tool("look", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("seen again"))
	actortest.Eventually(t, "the server back", func() bool { return slices.Equal(names(s), []string{"look"}) })
	if res, err := run(t, want2(t, s, "look"), nil); err != nil || res != "seen again" {
		t.Fatalf("look: %q %v", res, err)
	}
}

// What a call returns: its text parts (and a line for other parts), the
// structured result when there is nothing else, an error for isError and
// for a protocol error, at most MaxResultBytes.
func TestCallResults(t *testing.T) {
	srv := mcptest.Start(t, "s")
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	srv.Tool("echo", ro, func(_ context.Context, args map[string]any, n int) (*mcp.CallToolResult, error) {
		q, _ := args["q"].(string)
		return mcptest.Text("echo " + q), nil
	})
	srv.Tool("mixed", ro, func(context.Context, map[string]any, int) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "a chart:"},
			&mcp.ImageContent{MIMEType: "image/png", Data: []byte("12345")},
			&mcp.ResourceLink{Name: "report", URI: "file:///r.txt"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///n.txt", Text: "inline note"}},
		}}, nil
	})
	srv.Tool("structured", ro, func(context.Context, map[string]any, int) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: map[string]any{"n": 3}}, nil
	})
	srv.Tool("fails", ro, func(context.Context, map[string]any, int) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "disk full"}}}, nil
	})
	srv.Tool("broken", ro, func(context.Context, map[string]any, int) (*mcp.CallToolResult, error) {
		return nil, errors.New("handler exploded")
	})
	srv.Tool("big", ro, func(context.Context, map[string]any, int) (*mcp.CallToolResult, error) {
		return mcptest.Text(strings.Repeat("é", 1000)), nil
	})
	s := newSet(t, func(c *Config) { c.MaxResultBytes = 101 }, Server{Name: "s", URL: srv.URL})

	if res, err := run(t, want2(t, s, "echo"), map[string]any{"q": "hi"}); err != nil || res != "echo hi" {
		t.Errorf("echo: %q %v", res, err)
	}
	if res, err := run(t, want2(t, s, "mixed"), nil); err != nil ||
		res != "a chart:\n[image image/png, 5 bytes]\n[resource report: file:///r.txt]\ninline note" {
		t.Errorf("mixed: %q %v", res, err)
	}
	if res, err := run(t, want2(t, s, "structured"), nil); err != nil || res != `{"n":3}` {
		t.Errorf("structured: %q %v", res, err)
	}
	if res, err := run(t, want2(t, s, "fails"), nil); err == nil || err.Error() != "disk full" || res != "" {
		t.Errorf("fails: %q %v", res, err)
	}
	if _, err := run(t, want2(t, s, "broken"), nil); err == nil || !strings.Contains(err.Error(), "MCP server s: broken:") ||
		!strings.Contains(err.Error(), "handler exploded") {
		t.Errorf("broken: %v", err)
	}
	if res, err := run(t, want2(t, s, "big"), nil); err != nil || !strings.HasPrefix(res, strings.Repeat("é", 50)+"\n[cut: 2000 bytes in all]") {
		t.Errorf("big: %q %v", res, err)
	}
	// A live server's errors leave its tools offered.
	if len(names(s)) != 6 {
		t.Errorf("tools after the errors: %v", names(s))
	}
}

// Header goes with every request: a server that wants a bearer token
// lists its tools only to the Set that sends it.
func TestHeader(t *testing.T) {
	srv := mcptest.Start(t, "s")
	srv.RequireHeader("Authorization", "Bearer t0k3n")
	srv.Tool("secret", &mcp.ToolAnnotations{ReadOnlyHint: true}, text("s3"))
	without := newSet(t, nil, Server{Name: "s", URL: srv.URL})
	if _, note := without.OpenAITools(); len(names(without)) != 0 || !strings.Contains(note, ": s.") {
		t.Fatalf("without the token: tools %v, note %q", names(without), note)
	}
	with := newSet(t, nil, Server{Name: "s", URL: srv.URL, Header: http.Header{"Authorization": {"Bearer t0k3n"}}})
	if res, err := run(t, want2(t, with, "secret"), nil); err != nil || res != "s3" {
		t.Fatalf("with the token: %q %v", res, err)
	}
}

func TestConfigChecks(t *testing.T) {
	for name, servers := range map[string][]Server{
		"not http":       {{URL: "127.0.0.1:8000/mcp"}},
		"no host":        {{URL: "http:///mcp"}},
		"bad name":       {{Name: "a b", URL: "http://127.0.0.1:1/mcp"}},
		"duplicate name": {{Name: "a", URL: "http://127.0.0.1:1/mcp"}, {Name: "a", URL: "http://127.0.0.1:2/mcp"}},
	} {
		if s, err := New(t.Context(), Config{Servers: servers}); err == nil {
			s.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

// A server's progress notifications for a call reach the call's progress
// (the actor keeps the newest as the pending call's partial result).
func TestCallProgress(t *testing.T) {
	srv := mcptest.Start(t, "s")
	seen := make(chan string, 4)
	srv.Tool("slow", &mcp.ToolAnnotations{ReadOnlyHint: true}, func(ctx context.Context, _ map[string]any, _ int) (*mcp.CallToolResult, error) {
		for i, msg := range []string{"first half", ""} {
			if err := mcptest.Progress(ctx, msg, float64(i+1)); err != nil {
				return nil, err
			}
		}
		// The client handles notifications apart from the call's answer:
		// answer once both arrived, as a slow tool would.
		for range 2 {
			select {
			case <-seen:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return mcptest.Text("done"), nil
	})
	s := newSet(t, nil, Server{Name: "s", URL: srv.URL})
	var mu sync.Mutex
	var got []string
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	res, err := want2(t, s, "slow").Run(ctx, nil, func(p string) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
		seen <- p
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil || res != "done" || strings.Join(got, "|") != "first half|2" {
		t.Fatalf("slow: %q %v, progress %q", res, err, got)
	}
}
