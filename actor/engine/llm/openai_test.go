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

	"github.com/openai/openai-go/v3"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/wal"
)

// oaiWait bounds every wait in these tests; nothing waits on time.
const oaiWait = 20 * time.Second

func userTurn(content string) engine.TurnInput {
	return engine.TurnInput{SessionID: "s1", User: wal.Entry{Seq: 1, Role: engine.RoleUser, Content: content}}
}

func streamIn(t *testing.T, e *Engine, in engine.TurnInput) (engine.Action, []string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), oaiWait)
	defer cancel()
	var p partsRecorder
	act, err := e.Stream(ctx, in, p.add)
	if ctx.Err() != nil {
		t.Fatalf("Stream still running after %s", oaiWait)
	}
	return act, p.got(), err
}

func TestOpenAIStreamsText(t *testing.T) {
	leakCheck(t)
	f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ fakeRequest) {
		sseHeader(w)
		sseSend(w, textChunk("Hel"), textChunk("lo"), textChunk(""))
		sseSend(w, textChunk(", wor"), textChunk("ld!"))
		sseSend(w, finishChunk("stop"))
		sseDone(w)
	})
	e := newTestOpenAI(t, f, nil, nil)
	act, parts, err := streamIn(t, e, userTurn("hi there"))
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if want := []string{"Hel", "lo", ", wor", "ld!"}; !slices.Equal(parts, want) {
		t.Fatalf("parts %q, want %q", parts, want)
	}
	if act.Reply != strings.Join(parts, "") || act.Call != nil {
		t.Fatalf("action %+v, parts %q", act, parts)
	}

	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Auth != "Bearer "+testAPIKey || r.Body.Model != "test-model" || !r.Body.Stream {
		t.Fatalf("auth %q model %q stream %v", r.Auth, r.Body.Model, r.Body.Stream)
	}
	var names []string
	for _, tl := range r.Body.Tools {
		names = append(names, tl.Function.Name)
	}
	if !slices.Equal(names, []string{"search", "get_time"}) || r.Body.ParallelToolCalls != nil {
		t.Fatalf("tools %v, parallel_tool_calls %v", names, r.Body.ParallelToolCalls)
	}
	if r.Body.Tools[0].Function.Parameters["required"] == nil {
		t.Fatalf("search declared without its schema: %s", r.Raw)
	}
	m := r.Body.Messages
	if len(m) != 2 || m[0].Role != "system" || m[0].text() != DefaultOpenAISystem || m[1].Role != "user" || m[1].text() != "hi there" {
		t.Fatalf("messages %s", r.Raw)
	}

	// Next is the same step without the parts.
	act2, err := e.Next(context.Background(), userTurn("hi there"))
	if err != nil || act2.Reply != act.Reply {
		t.Fatalf("Next: %+v, %v", act2, err)
	}
}

// The model asks for search; the step after the tool ran sends the call
// and its result back with matching ids, and the model's answer is the
// reply.
func TestOpenAIToolCallRoundTrip(t *testing.T) {
	leakCheck(t)
	f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, n int, _ fakeRequest) {
		if n == 0 {
			sseHeader(w)
			sseSend(w, textChunk("Let me look. "))
			sseSend(w, toolChunk(0, "call_model_1", "search", `{"que`), toolChunk(0, "", "", `ry": "go `))
			sseSend(w, toolChunk(0, "", "", `generics", "limit": 3}`), finishChunk("tool_calls"))
			sseDone(w)
			return
		}
		streamText(w, "Generics ", "arrived in Go 1.18.")
	})
	e := newTestOpenAI(t, f, nil, nil)
	in := userTurn("when did go get generics?")
	act, parts, err := streamIn(t, e, in)
	if err != nil {
		t.Fatalf("step 1: %v", err)
	}
	if act.Call == nil || act.Call.Name != "search" || act.Reply != "" {
		t.Fatalf("step 1 action %+v", act)
	}
	if q, _ := act.Call.Args["query"].(string); q != "go generics" || act.Call.Args["limit"] != 3.0 {
		t.Fatalf("call args %v", act.Call.Args)
	}
	if !slices.Equal(parts, []string{"Let me look. "}) {
		t.Fatalf("step 1 parts %q", parts)
	}

	// The actor journals the call (started, with args) and its outcome.
	tl, _ := e.Tool("search")
	result, err := tl.Run(context.Background(), act.Call.Args, func(string) {})
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	md := func(status string) map[string]any {
		m := map[string]any{"call_id": "call-2", "name": "search", "status": status, "reply_to": uint64(1)}
		if status == engine.ToolStarted {
			m["args"] = act.Call.Args
		} else {
			m["result"] = result
		}
		return m
	}
	in.Steps = []wal.Entry{
		{Seq: 2, Role: engine.RoleTool, Metadata: md(engine.ToolStarted)},
		{Seq: 3, Role: engine.RoleTool, Content: result, Metadata: md(engine.ToolCompleted)},
	}
	act, parts, err = streamIn(t, e, in)
	if err != nil {
		t.Fatalf("step 2: %v", err)
	}
	if act.Reply != "Generics arrived in Go 1.18." || act.Call != nil || strings.Join(parts, "") != act.Reply {
		t.Fatalf("step 2 action %+v parts %q", act, parts)
	}

	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	m := reqs[1].Body.Messages
	if len(m) != 4 || m[1].Role != "user" || m[2].Role != "assistant" || m[3].Role != "tool" {
		t.Fatalf("step 2 messages %s", reqs[1].Raw)
	}
	if len(m[2].ToolCalls) != 1 {
		t.Fatalf("assistant message without its tool call: %s", reqs[1].Raw)
	}
	c := m[2].ToolCalls[0]
	var args map[string]any
	if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
		t.Fatalf("arguments %q: %v", c.Function.Arguments, err)
	}
	if c.ID != "call-2" || c.Type != "function" || c.Function.Name != "search" || args["query"] != "go generics" {
		t.Fatalf("tool call %+v", c)
	}
	if m[3].ToolCallID != c.ID || m[3].text() != result {
		t.Fatalf("tool message %+v, want id %s and %q", m[3], c.ID, result)
	}

	// A failed call is sent as such.
	in.Steps[1].Metadata = map[string]any{"call_id": "call-2", "name": "search", "status": engine.ToolFailed, "result": "interrupted"}
	in.Steps[1].Content = "interrupted"
	if _, _, err := streamIn(t, e, in); err != nil {
		t.Fatalf("step 2 after a failure: %v", err)
	}
	m = f.requests()[2].Body.Messages
	if got := m[len(m)-1]; got.Role != "tool" || got.ToolCallID != "call-2" || !strings.Contains(got.text(), "failed: interrupted") {
		t.Fatalf("failed tool message %+v", got)
	}
}

func TestOpenAIRetriesRateLimit(t *testing.T) {
	leakCheck(t)
	var logs logBuffer
	f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, n int, _ fakeRequest) {
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			apiError(w, http.StatusTooManyRequests, "slow down")
			return
		}
		streamText(w, "ok")
	})
	e := newTestOpenAI(t, f, debugLogger(&logs), nil)
	start := time.Now()
	act, _, err := streamIn(t, e, userTurn("hi"))
	if err != nil || act.Reply != "ok" {
		t.Fatalf("after a 429: %+v, %v", act, err)
	}
	if n := len(f.requests()); n != 2 {
		t.Fatalf("%d requests, want 2 (one 429, one retry)", n)
	}
	// Retry-After: 1 is honoured (a lower bound: safe on a slow machine).
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("retried after %s, before the Retry-After second", d)
	}
	if !strings.Contains(logs.String(), "status=429") {
		t.Fatalf("the 429 was not logged:\n%s", logs.String())
	}
}

// A Retry-After longer than the engine waits ends the turn at once with
// the rate limit, instead of a turn that hangs.
func TestOpenAIRateLimitTooLong(t *testing.T) {
	leakCheck(t)
	f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ fakeRequest) {
		w.Header().Set("Retry-After", "3600")
		apiError(w, http.StatusTooManyRequests, "quota exceeded")
	})
	e := newTestOpenAI(t, f, nil, nil)
	_, _, err := streamIn(t, e, userTurn("hi"))
	if err == nil || !strings.Contains(err.Error(), "429") || !strings.Contains(err.Error(), "quota exceeded") {
		t.Fatalf("err %v", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}
}

func TestOpenAIServerErrorAfterRetries(t *testing.T) {
	leakCheck(t)
	f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ fakeRequest) {
		apiError(w, http.StatusInternalServerError, "model crashed")
	})
	e := newTestOpenAI(t, f, nil, func(c *Config) { c.MaxRetries, c.MaxRetryDelay = 2, 20*time.Millisecond })
	act, parts, err := streamIn(t, e, userTurn("hi"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 {
		t.Fatalf("err %v, want a 500 API error", err)
	}
	for _, want := range []string{"500 Internal Server Error", "3 attempts", "model crashed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if act.Reply != "" || act.Call != nil || len(parts) != 0 {
		t.Fatalf("action %+v parts %q", act, parts)
	}
	if n := len(f.requests()); n != 3 {
		t.Fatalf("%d requests, want 1 + 2 retries", n)
	}
}

func TestOpenAIStreamCutOff(t *testing.T) {
	t.Run("ends without finishing", func(t *testing.T) {
		leakCheck(t)
		f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ fakeRequest) {
			sseHeader(w)
			sseSend(w, textChunk("The answer is"), textChunk(" forty"))
			// The handler returns: a clean end of the body, with neither a
			// finish_reason nor [DONE].
		})
		e := newTestOpenAI(t, f, nil, nil)
		act, parts, err := streamIn(t, e, userTurn("hi"))
		if !errors.Is(err, ErrStreamCut) {
			t.Fatalf("err %v, want ErrStreamCut", err)
		}
		if act.Reply != "" || act.Call != nil || !slices.Equal(parts, []string{"The answer is", " forty"}) {
			t.Fatalf("action %+v parts %q", act, parts)
		}
		if n := len(f.requests()); n != 1 {
			t.Fatalf("%d requests: a stream that showed parts must not be sent again", n)
		}
	})
	t.Run("connection dropped", func(t *testing.T) {
		leakCheck(t)
		f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ fakeRequest) {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			ev := "data: " + textChunk("The answer") + "\n\n"
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			fmt.Fprintf(buf, "%x\r\n%s\r\n", len(ev), ev)
			fmt.Fprintf(buf, "40\r\ndata: {\"choices\":[{\"ind") // cut inside a chunk
			buf.Flush()
		})
		e := newTestOpenAI(t, f, nil, nil)
		act, parts, err := streamIn(t, e, userTurn("hi"))
		if err == nil || act.Reply != "" || act.Call != nil {
			t.Fatalf("action %+v err %v", act, err)
		}
		if !slices.Equal(parts, []string{"The answer"}) {
			t.Fatalf("parts %q", parts)
		}
	})
}

func TestOpenAITimeout(t *testing.T) {
	t.Run("no answer", func(t *testing.T) {
		leakCheck(t)
		var f *fakeModel
		f = newFakeModel(t, func(_ http.ResponseWriter, r *http.Request, _ int, _ fakeRequest) { f.hang(r) })
		e := newTestOpenAI(t, f, nil, func(c *Config) { c.Timeout = 300 * time.Millisecond })
		_, _, err := streamIn(t, e, userTurn("hi"))
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not finish within 300ms") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("stalls mid-stream", func(t *testing.T) {
		leakCheck(t)
		var f *fakeModel
		f = newFakeModel(t, func(w http.ResponseWriter, r *http.Request, _ int, _ fakeRequest) {
			sseHeader(w)
			sseSend(w, textChunk("Thinking"))
			f.hang(r)
		})
		// Long enough for the first chunk to arrive on a loaded machine.
		e := newTestOpenAI(t, f, nil, func(c *Config) { c.Timeout = 2 * time.Second })
		act, parts, err := streamIn(t, e, userTurn("hi"))
		if !errors.Is(err, context.DeadlineExceeded) || act.Reply != "" || !slices.Equal(parts, []string{"Thinking"}) {
			t.Fatalf("action %+v parts %q err %v", act, parts, err)
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		leakCheck(t)
		var f *fakeModel
		started := make(chan struct{}, 1)
		f = newFakeModel(t, func(_ http.ResponseWriter, r *http.Request, _ int, _ fakeRequest) {
			started <- struct{}{}
			f.hang(r)
		})
		e := newTestOpenAI(t, f, nil, nil) // the default timeout is minutes
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := e.Stream(ctx, userTurn("hi"), func(string) {})
			done <- err
		}()
		select {
		case <-started:
		case <-time.After(oaiWait):
			t.Fatal("no request")
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v", err)
			}
		case <-time.After(oaiWait):
			t.Fatal("Stream did not return after its context ended")
		}
	})
}

func TestOpenAIBadReplies(t *testing.T) {
	cases := []struct {
		name   string
		events []string
		want   error
		says   string
	}{
		{"empty", []string{finishChunk("stop")}, ErrEmptyReply, "empty reply"},
		{"arguments not json", []string{toolChunk(0, "c1", "search", `{"query": "go`), finishChunk("tool_calls")}, ErrBadToolCall, "search"},
		{"arguments not an object", []string{toolChunk(0, "c1", "search", `["go"]`), finishChunk("tool_calls")}, ErrBadToolCall, "search"},
		{"no tool name", []string{toolChunk(0, "c1", "", `{}`), finishChunk("tool_calls")}, ErrBadToolCall, "no tool name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ fakeRequest) {
				sseHeader(w)
				sseSend(w, tc.events...)
				sseDone(w)
			})
			e := newTestOpenAI(t, f, nil, nil)
			act, _, err := streamIn(t, e, userTurn("hi"))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) || act.Call != nil || act.Reply != "" {
				t.Fatalf("action %+v err %v, want %v saying %q", act, err, tc.want, tc.says)
			}
		})
	}
	t.Run("no arguments", func(t *testing.T) {
		leakCheck(t)
		f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ fakeRequest) {
			sseHeader(w)
			sseSend(w, toolChunk(0, "c1", "get_time", ""), finishChunk("tool_calls"))
			sseDone(w)
		})
		e := newTestOpenAI(t, f, nil, nil)
		act, _, err := streamIn(t, e, userTurn("what time is it?"))
		if err != nil || act.Call == nil || act.Call.Name != "get_time" || act.Call.Args == nil || len(act.Call.Args) != 0 {
			t.Fatalf("action %+v err %v", act, err)
		}
	})
}

// The API key is sent to the server and nowhere else: not in errors, not
// in logs, even when the server echoes it back.
func TestOpenAIKeyNeverLeaks(t *testing.T) {
	leakCheck(t)
	var logs logBuffer
	f := newFakeModel(t, func(w http.ResponseWriter, r *http.Request, n int, _ fakeRequest) {
		switch n {
		case 0:
			apiError(w, http.StatusUnauthorized, "Incorrect API key provided: "+testAPIKey)
		case 1:
			w.Header().Set("Retry-After-Ms", "10")
			apiError(w, http.StatusTooManyRequests, "rate limit for key "+testAPIKey)
		default:
			sseHeader(w)
			sseSend(w, `{"error":{"message":"stream failed for `+testAPIKey+`"}}`)
		}
	})
	e := newTestOpenAI(t, f, debugLogger(&logs), func(c *Config) { c.MaxRetries = -1 })
	var errs []error
	for range 3 {
		_, _, err := streamIn(t, e, userTurn("hi"))
		if err == nil {
			t.Fatal("no error")
		}
		errs = append(errs, err)
	}
	for i, r := range f.requests() {
		if r.Auth != "Bearer "+testAPIKey {
			t.Fatalf("request %d sent Authorization %q", i, r.Auth)
		}
	}
	for _, err := range errs {
		for _, s := range []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
			if strings.Contains(s, testAPIKey) || strings.Contains(s, "7c1f9e") {
				t.Fatalf("the key is in an error: %s", s)
			}
		}
	}
	if !strings.Contains(errs[0].Error(), "401") || !strings.Contains(errs[0].Error(), "[redacted]") {
		t.Fatalf("401 error %q", errs[0])
	}
	if out := logs.String(); strings.Contains(out, "7c1f9e") || !strings.Contains(out, "model request failed") {
		t.Fatalf("logs:\n%s", out)
	}
}

func TestOpenAIConfigChecks(t *testing.T) {
	ok := Config{BaseURL: "http://127.0.0.1:11434/v1", Model: "m"}
	for name, mod := range map[string]func(*Config){
		"no model":         func(c *Config) { c.Model = "" },
		"no base url":      func(c *Config) { c.BaseURL = "" },
		"not http":         func(c *Config) { c.BaseURL = "127.0.0.1:11434" },
		"bad tool name":    func(c *Config) { c.Tools = []Tool{{Tool: engine.Tool{Name: "a b", Run: fakeRun}}} },
		"tool without run": func(c *Config) { c.Tools = []Tool{{Tool: engine.Tool{Name: "x"}}} },
		"duplicate tool": func(c *Config) {
			c.Tools = []Tool{{Tool: engine.Tool{Name: "x", Run: fakeRun}}, {Tool: engine.Tool{Name: "x", Run: fakeRun}}}
		},
	} {
		c := ok
		mod(&c)
		if e, err := New(c); err == nil {
			e.Close()
			t.Errorf("%s: accepted", name)
		}
	}
	c := ok
	c.Tools = []Tool{}
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, ok := e.Tool("search"); ok || len(e.toolDefs) != 0 {
		t.Fatal("an empty tool list still offers tools")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

func fakeRun(context.Context, map[string]any, func(string)) (string, error) { return "", nil }

// Without tools the request declares none: an empty list is refused by
// some servers.
func TestOpenAINoTools(t *testing.T) {
	leakCheck(t)
	f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ fakeRequest) { streamText(w, "plain") })
	e := newTestOpenAI(t, f, nil, func(c *Config) { c.Tools = []Tool{} })
	if act, _, err := streamIn(t, e, userTurn("hi")); err != nil || act.Reply != "plain" {
		t.Fatalf("%+v %v", act, err)
	}
	if raw := string(f.requests()[0].Raw); strings.Contains(raw, `"tools"`) {
		t.Fatalf("tools declared: %s", raw)
	}
	if _, ok := e.Tool("search"); ok {
		t.Fatal("search offered")
	}
}
