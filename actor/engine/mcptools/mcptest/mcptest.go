package mcptest

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Server is a running MCP server.
type Server struct {
	*mcp.Server
	// URL is the streamable HTTP endpoint.
	URL string
	hs  *httptest.Server

	mu        sync.Mutex
	calls     map[string]int
	header    [2]string // required header name and value, if set
	closeOnce sync.Once
}

// Handler runs one call of a tool; n is which call of the tool it is,
// from 1.
type Handler func(ctx context.Context, args map[string]any, n int) (*mcp.CallToolResult, error)

// Start starts a server on a free 127.0.0.1 port; it is closed when the
// test ends.
func Start(t testing.TB, name string) *Server { return StartAt(t, name, "127.0.0.1:0") }

// StartAt starts a server on addr: one that comes up where a client was
// told to look.
func StartAt(t testing.TB, name, addr string) *Server {
	t.Helper()
	s := &Server{Server: mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil), calls: make(map[string]int)}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.Server }, nil)
	s.hs = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		hdr := s.header
		s.mu.Unlock()
		if hdr[0] != "" && r.Header.Get(hdr[0]) != hdr[1] {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("mcptest: listen %s: %v", addr, err)
	}
	s.hs.Listener = l
	s.hs.Start()
	s.URL = s.hs.URL + "/mcp"
	t.Cleanup(s.Close)
	return s
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.hs.Listener.Addr().String() }

// RequireHeader makes the server refuse (401) requests without the
// header.
func (s *Server) RequireHeader(name, value string) {
	s.mu.Lock()
	s.header = [2]string{name, value}
	s.mu.Unlock()
}

// Tool adds (or replaces) a tool with the given annotations (nil: none),
// taking any arguments; its calls are counted before run runs.
func (s *Server) Tool(name string, ann *mcp.ToolAnnotations, run Handler) {
	tool := &mcp.Tool{Name: name, Description: "test tool " + name, Annotations: ann,
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}
	s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.mu.Lock()
		s.calls[name]++
		n := s.calls[name]
		s.mu.Unlock()
		args := map[string]any{}
		if req.Params != nil && len(req.Params.Arguments) > 0 {
			if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
				return nil, err
			}
		}
		if tok := req.Params.GetProgressToken(); tok != nil {
			ctx = context.WithValue(ctx, progressKey{}, func(msg string, done float64) error {
				return req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: msg, Progress: done})
			})
		}
		return run(ctx, args, n)
	})
}

type progressKey struct{}

// Progress sends a progress notification for the call a Handler runs
// (msg, and done as its progress); it does nothing when the client asked
// for none (no progress token).
func Progress(ctx context.Context, msg string, done float64) error {
	if f, ok := ctx.Value(progressKey{}).(func(string, float64) error); ok {
		return f(msg, done)
	}
	return nil
}

// Calls is how often the named tool was called.
func (s *Server) Calls(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[name]
}

// Close stops the server as a crash would for its clients: it cuts the
// connections it has open, and ends its sessions.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.hs.CloseClientConnections()
		s.hs.Close()
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	})
}

// Text is a result of one text part.
func Text(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// Bool is a pointer to b, for ToolAnnotations.DestructiveHint.
func Bool(b bool) *bool { return &b }
