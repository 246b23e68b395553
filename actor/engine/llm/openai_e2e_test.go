package llm

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// oaiConn records the entries the actor delivers; delta is closed at
// the first delta.
type oaiConn struct {
	mu      sync.Mutex
	entries []wal.Entry
	changed chan struct{}
	delta   chan struct{}
	deltas  int
}

func newOAIConn() *oaiConn {
	return &oaiConn{changed: make(chan struct{}, 1), delta: make(chan struct{})}
}

func (c *oaiConn) Deliver(o machine.Out) {
	if _, ok := o.(*machine.DeltaOut); ok {
		c.mu.Lock()
		if c.deltas++; c.deltas == 1 {
			close(c.delta)
		}
		c.mu.Unlock()
	}
	if e, ok := o.(*machine.EntryOut); ok {
		c.mu.Lock()
		c.entries = append(c.entries, e.Entry)
		c.mu.Unlock()
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
}

func (c *oaiConn) Close(machine.CloseReason, string) {}

// wait waits for ch to be closed.
func wait(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(oaiWait):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitEntries waits until n entries were delivered and returns them.
func (c *oaiConn) waitEntries(t *testing.T, n int) []wal.Entry {
	t.Helper()
	deadline := time.NewTimer(oaiWait)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		got := append([]wal.Entry(nil), c.entries...)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-c.changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d entries; have %s", n, dumpEntries(got))
		}
	}
}

func dumpEntries(es []wal.Entry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "\n  %d %s %q %v", e.Seq, e.Role, e.Content, e.Metadata["status"])
	}
	return b.String()
}

// oaiRegistry is a real registry on a real log, running engine e.
func oaiRegistry(t *testing.T, e engine.Engine) (*wal.Log, *actor.Registry) {
	t.Helper()
	quietLog := slog.New(slog.DiscardHandler)
	log, err := wal.New(wal.Config{Dir: t.TempDir(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := log.Close(); err != nil {
			t.Errorf("log close: %v", err)
		}
	})
	reg, err := actor.New(actor.Config{Journal: log, Engine: e, Logger: quietLog, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Errorf("registry close: %v", err)
		}
	})
	return log, reg
}

// A user send through a real registry on a real log: the model asks for
// search, the actor journals the call as started, runs it once, journals
// its result, and the model's answer to the result is the agent's entry.
func TestOpenAIThroughActor(t *testing.T) {
	leakCheck(t)
	f := newFakeModel(t, func(w http.ResponseWriter, _ *http.Request, _ int, req fakeRequest) {
		for _, m := range req.Body.Messages {
			if m.Role == "tool" {
				streamText(w, "Tether keeps ", "sessions alive.")
				return
			}
		}
		sseHeader(w)
		sseSend(w, toolChunk(0, "call_xyz", "search", `{"query":"tether"}`), finishChunk("tool_calls"))
		sseDone(w)
	})
	var runs atomic.Int32
	search := BuiltinTools(BuiltinToolsConfig{SearchDelay: 30 * time.Millisecond})[0]
	run := search.Run
	search.Run = func(ctx context.Context, args map[string]any, progress func(string)) (string, error) {
		runs.Add(1)
		return run(ctx, args, progress)
	}
	quietLog := slog.New(slog.DiscardHandler)
	e := newTestOpenAI(t, f, quietLog, func(c *Config) { c.Tools = []Tool{search} })

	log, reg := oaiRegistry(t, e)

	ctx, cancel := context.WithTimeout(context.Background(), oaiWait)
	defer cancel()
	conn := newOAIConn()
	h, err := reg.Create(ctx, actor.CreateRequest{SessionID: "s1", UserID: "u", Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Send(ctx, "m1", "what is tether?", nil); err != nil {
		t.Fatal(err)
	}
	got := conn.waitEntries(t, 4)
	want := []struct{ role, status string }{{engine.RoleUser, ""}, {engine.RoleTool, engine.ToolStarted}, {engine.RoleTool, engine.ToolCompleted}, {engine.RoleAgent, ""}}
	if len(got) != len(want) {
		t.Fatalf("entries %s", dumpEntries(got))
	}
	for i, w := range want {
		if got[i].Seq != uint64(i+1) || got[i].Role != w.role || mdStr(got[i], "status") != w.status {
			t.Fatalf("entry %d: want %s %s; entries %s", i+1, w.role, w.status, dumpEntries(got))
		}
	}
	if q, _ := got[1].Metadata["args"].(map[string]any); q["query"] != "tether" || mdStr(got[1], "name") != "search" {
		t.Fatalf("started entry %+v", got[1])
	}
	result := got[2].Content
	if !strings.Contains(result, `"tether"`) || got[3].Content != "Tether keeps sessions alive." {
		t.Fatalf("entries %s", dumpEntries(got))
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("search ran %d times", n)
	}
	if n := reg.Stats().ToolRuns; n != 1 {
		t.Fatalf("registry counted %d tool runs", n)
	}

	// The log holds the same, in the same order.
	logged, err := log.Read("s1", 1, 5, 10, false)
	if err != nil || len(logged) != 4 || logged[3].Content != got[3].Content || logged[2].Content != result {
		t.Fatalf("log: %s, %v", dumpEntries(logged), err)
	}

	// The second request carried the call and its result, ids matching.
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	m := reqs[1].Body.Messages
	if len(m) != 4 || m[1].text() != "what is tether?" || len(m[2].ToolCalls) != 1 || m[3].Role != "tool" {
		t.Fatalf("second request: %s", reqs[1].Raw)
	}
	callID := mdStr(got[2], "call_id")
	if c := m[2].ToolCalls[0]; c.ID != callID || c.Function.Name != "search" || m[3].ToolCallID != callID || m[3].text() != result {
		t.Fatalf("call %+v / tool message %+v, want id %s", c, m[3], callID)
	}
}

// A cancel while the model is streaming closes the model request (the
// fake server sees it go), keeps the text so far as the agent's entry
// marked cancelled, and the next send is answered.
func TestOpenAICancelClosesRequest(t *testing.T) {
	leakCheck(t)
	streaming := make(chan struct{})
	closed := make(chan struct{})
	f := newFakeModel(t, func(w http.ResponseWriter, r *http.Request, n int, _ fakeRequest) {
		if n > 0 {
			streamText(w, "Fine.")
			return
		}
		sseHeader(w)
		sseSend(w, textChunk("Let me think "))
		close(streaming)
		<-r.Context().Done()
		close(closed)
	})
	e := newTestOpenAI(t, f, slog.New(slog.DiscardHandler), nil)
	_, reg := oaiRegistry(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), oaiWait)
	defer cancel()
	conn := newOAIConn()
	h, err := reg.Create(ctx, actor.CreateRequest{SessionID: "s1", UserID: "u", Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Send(ctx, "m1", "think hard", nil); err != nil {
		t.Fatal(err)
	}
	wait(t, "the model streaming", streaming)
	conn.waitEntries(t, 1)
	// Cancel once the part has reached the session (its delta went out):
	// the reply's entry then holds it.
	wait(t, "the part reaches the session", conn.delta)
	if err := h.Cancel(ctx, 0); err != nil {
		t.Fatal(err)
	}
	got := conn.waitEntries(t, 2)
	if got[1].Role != engine.RoleAgent || got[1].Content != "Let me think " || got[1].Metadata["cancelled"] != true {
		t.Fatalf("entries %s", dumpEntries(got))
	}
	wait(t, "the model request closed", closed)
	if err := h.Send(ctx, "m2", "then answer", nil); err != nil {
		t.Fatal(err)
	}
	if got := conn.waitEntries(t, 4); got[3].Content != "Fine." {
		t.Fatalf("entries %s", dumpEntries(got))
	}
}
