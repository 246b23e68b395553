package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// fakeModel is an OpenAI-compatible chat-completions server on
// 127.0.0.1: it records each request and answers with respond, which is
// told the request's number (0 first).
type fakeModel struct {
	srv     *httptest.Server
	respond func(w http.ResponseWriter, r *http.Request, n int, req fakeRequest)
	// release is closed at cleanup, so that handlers that never answer
	// return and the server can close.
	release chan struct{}

	mu   sync.Mutex
	reqs []fakeRequest
}

// fakeRequest is a request as the fake server saw it.
type fakeRequest struct {
	Auth string
	Raw  []byte
	Body struct {
		Model             string    `json:"model"`
		Stream            bool      `json:"stream"`
		Messages          []fakeMsg `json:"messages"`
		ParallelToolCalls *bool     `json:"parallel_tool_calls"`
		Tools             []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string         `json:"name"`
				Parameters map[string]any `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
}

type fakeMsg struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCallID string `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// text is the message's content when it is a plain string.
func (m fakeMsg) text() string {
	s, _ := m.Content.(string)
	return s
}

func newFakeModel(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, n int, req fakeRequest)) *fakeModel {
	t.Helper()
	f := &fakeModel{respond: respond, release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.release)
		f.srv.Close()
	})
	return f
}

func (f *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "not found: "+r.URL.Path, http.StatusNotFound)
		return
	}
	var req fakeRequest
	req.Auth = r.Header.Get("Authorization")
	req.Raw, _ = io.ReadAll(r.Body)
	if err := json.Unmarshal(req.Raw, &req.Body); err != nil {
		http.Error(w, "bad json: "+err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	f.respond(w, r, n, req)
}

// requests returns what the server received so far.
func (f *fakeModel) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.reqs...)
}

// baseURL is what the engine is configured with.
func (f *fakeModel) baseURL() string { return f.srv.URL + "/v1" }

// hang blocks until the client goes away or the test ends.
func (f *fakeModel) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-f.release:
	}
}

// ---- SSE ----

func sseHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
}

// sseSend writes chunks as SSE events and flushes them.
func sseSend(w http.ResponseWriter, chunks ...string) {
	for _, c := range chunks {
		fmt.Fprintf(w, "data: %s\n\n", c)
	}
	w.(http.Flusher).Flush()
}

func sseDone(w http.ResponseWriter) { sseSend(w, "[DONE]") }

// chunk makes one chat.completion.chunk with a choice 0 of delta and
// finish reason (empty: null).
func chunk(delta map[string]any, finish string) string {
	choice := map[string]any{"index": 0, "delta": delta, "finish_reason": nil}
	if finish != "" {
		choice["finish_reason"] = finish
	}
	b, err := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "test-model",
		"choices": []any{choice},
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func textChunk(s string) string { return chunk(map[string]any{"role": "assistant", "content": s}, "") }

func finishChunk(reason string) string { return chunk(map[string]any{}, reason) }

// toolChunk is a fragment of tool call index: the first carries id and
// name, later ones only more of the arguments.
func toolChunk(index int, id, name, args string) string {
	call := map[string]any{"index": index, "function": map[string]any{"arguments": args}}
	if id != "" {
		call["id"], call["type"] = id, "function"
		call["function"].(map[string]any)["name"] = name
	}
	return chunk(map[string]any{"tool_calls": []any{call}}, "")
}

// streamText answers with parts, a stop and [DONE].
func streamText(w http.ResponseWriter, parts ...string) {
	sseHeader(w)
	for _, p := range parts {
		sseSend(w, textChunk(p))
	}
	sseSend(w, finishChunk("stop"))
	sseDone(w)
}

// apiError answers status with an OpenAI error body.
func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "test_error", "code": nil, "param": nil}})
	w.Write(b)
}

// ---- engine and checks ----

const testAPIKey = "sk-test-SECRET-7c1f9e"

// newTestOpenAI is an engine on f with a short retry delay; mod changes
// its config.
func newTestOpenAI(t *testing.T, f *fakeModel, log *slog.Logger, mod func(*Config)) *Engine {
	t.Helper()
	cfg := Config{
		BaseURL: f.baseURL(), Model: "test-model", APIKey: testAPIKey, Logger: log,
		MaxRetryDelay: 2 * time.Second, Tools: BuiltinTools(BuiltinToolsConfig{SearchDelay: 30 * time.Millisecond}),
	}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// leakCheck fails the test if it leaves goroutines behind; call it first,
// so it runs after every other cleanup.
func leakCheck(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

// logBuffer is a slog destination tests can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func debugLogger(b *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// partsRecorder collects a Stream's parts.
type partsRecorder struct {
	mu    sync.Mutex
	parts []string
}

func (p *partsRecorder) add(s string) {
	p.mu.Lock()
	p.parts = append(p.parts, s)
	p.mu.Unlock()
}

func (p *partsRecorder) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.parts...)
}
