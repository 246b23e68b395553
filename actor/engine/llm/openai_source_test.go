package llm

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tether-dev/tether/actor/engine"
)

// listSource is a ToolSource whose tools the test sets.
type listSource struct {
	mu    sync.Mutex
	tools []Tool
	note  string
}

func (s *listSource) set(note string, tools ...Tool) {
	s.mu.Lock()
	s.tools, s.note = tools, note
	s.mu.Unlock()
}

func (s *listSource) OpenAITools() ([]Tool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools, s.note
}

func (s *listSource) OpenAITool(name string) (Tool, bool) {
	tools, _ := s.OpenAITools()
	for _, t := range tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// A tool source's tools are offered at each step as they are then, after
// the built-in ones (a source tool named like one is left out); its note
// joins the system prompt; a call carries its tool's declaration.
func TestOpenAIToolSource(t *testing.T) {
	leakCheck(t)
	calls := []string{"wipe", "lookup"}
	f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, n int, _ fakeRequest) {
		sseHeader(w)
		sseSend(w, toolChunk(0, "c", calls[n%2], `{}`), finishChunk("tool_calls"))
		sseDone(w)
	})
	src := &listSource{}
	src.set("Server x cannot be reached.",
		Tool{Tool: engine.Tool{Name: "search", Run: fakeRun}},
		Tool{Tool: engine.Tool{Name: "lookup", Idempotent: true, Run: fakeRun}, Description: "look it up"},
		Tool{Tool: engine.Tool{Name: "wipe", Approval: true, Run: fakeRun}},
	)
	e := newTestOpenAI(t, f, nil, func(c *Config) { c.ToolSource = src })

	act, _, err := streamIn(t, e, userTurn("wipe it"))
	if err != nil || act.Call == nil || act.Call.Name != "wipe" || !act.Call.Approval || act.Call.Idempotent {
		t.Fatalf("step 1: %+v %v", act.Call, err)
	}
	act, _, err = streamIn(t, e, userTurn("look it up"))
	if err != nil || act.Call == nil || act.Call.Name != "lookup" || act.Call.Approval || !act.Call.Idempotent {
		t.Fatalf("step 2: %+v %v", act.Call, err)
	}
	if tl, ok := e.Tool("search"); !ok || !tl.Idempotent {
		t.Fatalf("search is not the built-in one: %+v", tl)
	}
	src.set("", Tool{Tool: engine.Tool{Name: "lookup", Idempotent: true, Run: fakeRun}})
	if _, _, err := streamIn(t, e, userTurn("again")); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Tool("wipe"); ok {
		t.Fatal("a tool the source no longer has is still known")
	}

	reqs := f.requests()
	declared := func(r fakeRequest) []string {
		var out []string
		for _, tl := range r.Body.Tools {
			out = append(out, tl.Function.Name)
		}
		return out
	}
	if got := declared(reqs[0]); !slices.Equal(got, []string{"search", "get_time", "lookup", "wipe"}) {
		t.Fatalf("first request declares %v", got)
	}
	if got := declared(reqs[2]); !slices.Equal(got, []string{"search", "get_time", "lookup"}) {
		t.Fatalf("after the change the request declares %v", got)
	}
	if sys := reqs[0].Body.Messages[0].text(); !strings.HasSuffix(sys, "\n\nServer x cannot be reached.") {
		t.Fatalf("system message %q", sys)
	}
	if sys := reqs[2].Body.Messages[0].text(); strings.Contains(sys, "cannot be reached") {
		t.Fatalf("system message after the change %q", sys)
	}
}
