package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const openaiTestKey = "sk-cmd-test-9d2b71"

func TestServeOpenAIFlags(t *testing.T) {
	for _, v := range []string{"TETHER_OPENAI_BASE_URL", "TETHER_OPENAI_MODEL", keyEnv, "TETHER_OPENAI_MAX_HISTORY", "TETHER_OPENAI_TIMEOUT"} {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
	parse := func(args ...string) (serveConfig, error) {
		var out bytes.Buffer
		m := &Main{Stdout: &out, Stderr: io.Discard}
		return m.parseServe(append([]string{"--jwt-secret", "s", "--agent", "openai"}, args...))
	}
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), "--openai-base-url") {
		t.Fatalf("no base url: %v", err)
	}
	if _, err := parse("--openai-base-url", "http://127.0.0.1:11434/v1"); err == nil || !strings.Contains(err.Error(), "--openai-model") {
		t.Fatalf("no model: %v", err)
	}
	if _, err := parse("--openai-base-url", "127.0.0.1:11434", "--openai-model", "m"); err == nil || !strings.Contains(err.Error(), "http(s) URL") {
		t.Fatalf("bad url: %v", err)
	}

	t.Setenv("TETHER_OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
	t.Setenv("TETHER_OPENAI_MODEL", "llama3.2")
	t.Setenv(keyEnv, openaiTestKey)
	t.Setenv("TETHER_OPENAI_MAX_HISTORY", "9000")
	c, err := parse("--openai-timeout", "45s")
	if err != nil {
		t.Fatal(err)
	}
	want := openaiFlags{baseURL: "http://127.0.0.1:11434/v1", model: "llama3.2", key: openaiTestKey, maxHistory: 9000, timeout: 45 * time.Second}
	if c.openai != want {
		t.Fatalf("flags %+v, want %+v", c.openai, want)
	}
	if c, err := parse("--openai-key", "other"); err != nil || c.openai.key != "other" {
		t.Fatalf("a flag key: %+v, %v", c.openai, err)
	}
	t.Setenv("TETHER_OPENAI_MAX_HISTORY", "lots")
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), "TETHER_OPENAI_MAX_HISTORY") {
		t.Fatalf("bad env value: %v", err)
	}
	t.Setenv("TETHER_OPENAI_MAX_HISTORY", "9000")

	// --help lists the flags, and not the key the environment holds.
	var out bytes.Buffer
	m := &Main{Stdout: &out, Stderr: io.Discard}
	if _, err := m.parseServe([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if h := out.String(); !strings.Contains(h, "-openai-base-url") || !strings.Contains(h, keyEnv) || strings.Contains(h, openaiTestKey) {
		t.Fatalf("help:\n%s", h)
	}
}

// fakeChat is a minimal OpenAI-compatible server: the first step of a
// turn calls the tool pick names for the user's message (get_time for
// newFakeChat), the step after the tool result answers "It is <result>.".
// It keeps what the latest request declared and its system prompt.
type fakeChat struct {
	srv    *httptest.Server
	mu     sync.Mutex
	n      int
	tools  []string
	system string
}

func newFakeChat(t *testing.T) *fakeChat {
	return newFakeChatTools(t, func(string) string { return "get_time" })
}

func newFakeChatTools(t *testing.T, pick func(user string) string) *fakeChat {
	f := &fakeChat{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		if r.Header.Get("Authorization") != "Bearer "+openaiTestKey || json.NewDecoder(r.Body).Decode(&body) != nil || len(body.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.n++
		f.tools = f.tools[:0]
		for _, tl := range body.Tools {
			f.tools = append(f.tools, tl.Function.Name)
		}
		f.system, _ = body.Messages[0].Content.(string)
		f.mu.Unlock()
		// The last message decides: earlier turns' tool results are history.
		last := body.Messages[len(body.Messages)-1]
		var delta map[string]any
		finish := "tool_calls"
		if last.Role == "tool" {
			delta, finish = map[string]any{"content": fmt.Sprintf("It is %v.", last.Content)}, "stop"
		} else {
			user, _ := last.Content.(string)
			delta = map[string]any{"tool_calls": []any{map[string]any{
				"index": 0, "id": "c1", "type": "function", "function": map[string]any{"name": pick(user), "arguments": "{}"},
			}}}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []map[string]any{
			{"index": 0, "delta": delta, "finish_reason": nil},
			{"index": 0, "delta": map[string]any{}, "finish_reason": finish},
		} {
			b, _ := json.Marshal(map[string]any{"id": "x", "object": "chat.completion.chunk", "choices": []any{c}})
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// seen is what the latest request declared, and its system prompt.
func (f *fakeChat) seen() ([]string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tools), f.system
}

// `tether serve --agent openai` answers through the model, running the
// tool the model asks for.
func TestServeOpenAIEngine(t *testing.T) {
	t.Parallel()
	_, stderr, code := runTether(t, "serve", "--agent", "openai", "--jwt-secret", "s", "--data", t.TempDir())
	if code == 0 || !strings.Contains(stderr, "--openai-base-url") {
		t.Fatalf("--agent openai without a server: exit %d, %s", code, stderr)
	}

	f := newFakeChat(t)
	p := startServe(t, t.TempDir(), "--agent", "openai", "--openai-base-url", f.srv.URL+"/v1",
		"--openai-model", "test-model", "--openai-key", openaiTestKey)
	c := dial(t, p.wsURL())
	c.hello(token(t, "alice"), "", 0)
	c.mustWrite(sendFrame("m1", "what time is it?"))
	var tool []string
	var result string
	reply := c.until(20*time.Second, "agent reply", failOnError(t), func(fr frame) bool {
		if fr.Type == "message" && fr.Role == "tool" {
			tool = append(tool, fr.MD("name")+" "+fr.MD("status"))
			if fr.MD("status") == "completed" {
				result = fr.Content
			}
		}
		return fr.Type == "message" && (fr.Role == "agent" || fr.Role == "system")
	})
	if _, err := time.Parse(time.RFC3339, strings.Fields(result + " ")[0]); err != nil || reply.Role != "agent" || reply.Content != "It is "+result+"." {
		t.Fatalf("tool result %q, reply %s", result, reply.Raw)
	}
	if strings.Join(tool, ",") != "get_time started,get_time completed" {
		t.Fatalf("tool entries %q", tool)
	}
	if s := p.Stderr(); strings.Contains(s, openaiTestKey) || !strings.Contains(s, "api_key_set=true") || !strings.Contains(s, "see in ps") {
		t.Fatalf("stderr:\n%s", s)
	}
}
