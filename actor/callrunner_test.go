package actor

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/actor/machine/machinetest"

	"github.com/tether-dev/tether/wal"
)

// callEngine declares its tools per call, as an agent endpoint does: a
// message mentioning "idem" asks for an idempotent call, "secret" a
// sensitive one, "approve" one that needs an approval. It has no Tool
// declarations at all: every run goes through RunCall.
type callEngine struct {
	*gatedEngine
	mu    sync.Mutex
	calls []engine.CallInput
	ins   []engine.TurnInput
}

var _ engine.CallRunner = (*callEngine)(nil)

func newCallEngine() *callEngine { return &callEngine{gatedEngine: newGatedEngine(false)} }

func (e *callEngine) Next(ctx context.Context, in engine.TurnInput) (engine.Action, error) {
	e.mu.Lock()
	e.ins = append(e.ins, in)
	e.mu.Unlock()
	act, err := e.gatedEngine.Next(ctx, in)
	if c := act.Call; c != nil {
		text := in.User.Content
		c.Idempotent = strings.Contains(text, "idem")
		c.Sensitive = strings.Contains(text, "secret")
		c.Approval = strings.Contains(text, "approve")
	}
	return act, err
}

func (e *callEngine) Tool(string) (engine.Tool, bool) { return engine.Tool{}, false }

func (e *callEngine) RunCall(ctx context.Context, c engine.CallInput, progress func(string)) (string, error) {
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.mu.Unlock()
	return e.g.run(c.Name)(ctx, c.Args, progress)
}

func (e *callEngine) callsSeen() []engine.CallInput {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.CallInput(nil), e.calls...)
}

// A CallRunner's call runs through RunCall with the session's, the user's
// and the call's ids; the engine sees the user id; a call declared
// sensitive marks the session sensitive.
func TestCallRunnerRunsCalls(t *testing.T) {
	eng := newCallEngine()
	e := newEnv(t, func(c *Config) { c.Engine = eng })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	started := sendToTool(t, h, c, eng.g, "q", "a secret search")
	eng.g.results <- "found"
	done := expect[*machine.EntryOut](t, c).Entry
	reply := expect[*machine.EntryOut](t, c).Entry
	if machinetest.MetaString(done, "status") != engine.ToolCompleted || reply.Role != engine.RoleAgent || !strings.Contains(reply.Content, "found") {
		t.Fatalf("after the run: %+v / %+v", done, reply)
	}
	calls := eng.callsSeen()
	if len(calls) != 1 || calls[0].SessionID != "s" || calls[0].UserID != "alice" ||
		calls[0].CallID != machinetest.MetaString(started, "call_id") || calls[0].Name != "search" || calls[0].Attempt != 0 {
		t.Fatalf("RunCall saw %+v, started entry %+v", calls, started)
	}
	eng.mu.Lock()
	user := eng.ins[0].UserID
	eng.mu.Unlock()
	if user != "alice" {
		t.Fatalf("TurnInput.UserID = %q", user)
	}
	if !e.header("s").Sensitive {
		t.Fatal("a call declared sensitive did not mark the session sensitive")
	}
}

// The per-call declaration outlives the process: after a restart a call
// declared idempotent runs again (same call id, attempt 1); one not
// declared so is logged failed "interrupted".
func TestCallRunnerRestart(t *testing.T) {
	for _, tc := range []struct {
		text string
		idem bool
	}{{"idem lookup", true}, {"plain lookup", false}} {
		t.Run(tc.text, func(t *testing.T) {
			eng := newCallEngine()
			e := newEnv(t, func(c *Config) { c.Engine = eng })
			c := newRecConn("c1")
			h := e.create("s", "alice", c)
			started := sendToTool(t, h, c, eng.g, "m1", tc.text)
			e.stop()
			eng2 := newCallEngine()
			e.cfg.Engine = eng2
			e.start()
			var es []wal.Entry
			if tc.idem {
				actortest.Recv(t, "the re-run", eng2.g.started)
				eng2.g.results <- "again"
				es = waitTurnDone(t, e, "s", 4)
				calls := eng2.callsSeen()
				if len(calls) != 1 || calls[0].CallID != machinetest.MetaString(started, "call_id") || calls[0].Attempt != 1 {
					t.Fatalf("re-run %+v", calls)
				}
				if machinetest.MetaString(es[2], "status") != engine.ToolCompleted || es[2].Content != "again" {
					t.Fatalf("entry 3 = %+v", es[2])
				}
				return
			}
			es = waitTurnDone(t, e, "s", 4)
			if machinetest.MetaString(es[2], "status") != engine.ToolFailed || es[2].Content != engine.ResultInterrupted {
				t.Fatalf("entry 3 = %+v", es[2])
			}
			if n := eng2.g.runs.Load(); n != 0 {
				t.Fatalf("a call not declared idempotent ran %d times after the restart", n)
			}
		})
	}
}
