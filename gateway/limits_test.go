package gateway_test

// Issue 6, items 5 and 6 (the gateway's part): per-session and per-user
// state is bounded, with the errors PROTOCOL.md names, and an append does
// not rewrite what did not change.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// TestContextLimit: a context frame that would grow the session's context
// beyond --max-context is refused with too_large and changes nothing; the
// connection stays open and smaller changes go on working.
func TestContextLimit(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Actor: actor.Config{MaxContextBytes: 1024}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	half := strings.Repeat("h", 500)
	c.send(map[string]any{"type": "context", "set": map[string]any{"a": half}})
	want := map[string]any{"a": half}
	if f := c.readType("context"); !jsonEq(f["context"], want) {
		t.Fatalf("context %v", f)
	}
	for name, set := range map[string]map[string]any{
		"one key too many":       {"b": strings.Repeat("b", 600)},
		"one value far too big":  {"c": strings.Repeat("c", 50_000)},
		"many small keys":        manyKeys(200),
		"replacing a with more":  {"a": strings.Repeat("A", 1100)},
		"within the frame limit": {"d": strings.Repeat("d", 30_000)},
	} {
		c.send(map[string]any{"type": "context", "set": set})
		e := c.readType("error")
		if e["code"] != "too_large" || !strings.Contains(str(t, e["message"]), "1024") {
			t.Fatalf("%s: %v, want too_large naming the limit", name, e)
		}
	}
	// Nothing changed, in memory or in the log, and the connection works.
	if s := n.snapshot(t, tok, sid); !jsonEq(s.Context, want) || s.LastSeq != 0 {
		t.Fatalf("after refused context frames: %v, last_seq %d", s.Context, s.LastSeq)
	}
	c.send(map[string]any{"type": "context", "set": map[string]any{"a": nil, "lang": "en"}})
	if f := c.readType("context"); !jsonEq(f["context"], map[string]any{"lang": "en"}) {
		t.Fatalf("removing a key: %v", f)
	}
	c.send(map[string]any{"type": "context", "set": map[string]any{"b": strings.Repeat("b", 600)}})
	if f := c.readType("context"); len(obj(t, f["context"])) != 2 {
		t.Fatalf("a context within the limit again: %v", f)
	}
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")
	r := dial(t, n.URL)
	s, _ := r.resume(tok, sid, 0)
	if len(obj(t, s["context"])) != 2 {
		t.Fatalf("resumed context %v", s["context"])
	}
}

func manyKeys(k int) map[string]any {
	m := map[string]any{}
	for i := range k {
		m[fmt.Sprintf("key-%03d", i)] = i
	}
	return m
}

// TestTurnQueueCapped: while the agent works, at most --max-turns user
// messages wait for it; a send beyond is refused with rate_limited, its
// message saying the agent is busy, and nothing stored. Once the queue
// drains the same id is accepted.
func TestTurnQueueCapped(t *testing.T) {
	t.Parallel()
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 3 * time.Second})
	n := startNode(t, nodetest.Options{Actor: actor.Config{Engine: demo, MaxTurns: 2}, Gateway: gateway.Config{NoRateLimit: true}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	const sends = 6
	for i := range sends {
		c.sendMsg(fmt.Sprintf("q%d", i), fmt.Sprintf("laptop %d", i))
	}
	acked, busy := map[string]uint64{}, map[string]bool{}
	for len(acked)+len(busy) < sends {
		f := c.read()
		switch f["type"] {
		case "ack":
			acked[str(t, f["id"])] = num(t, f["seq"])
		case "error":
			if f["code"] != "rate_limited" || !strings.Contains(str(t, f["message"]), "busy") {
				t.Fatalf("want rate_limited saying the agent is busy, got %v", f)
			}
			busy[str(t, f["id"])] = true
		}
	}
	// Each turn takes 3 s: the first two sends fill the queue before
	// the first turn ends, and the rest are refused.
	if len(acked) != 2 || acked["q0"] == 0 || acked["q1"] == 0 {
		t.Fatalf("acked %v, busy %v: want q0 and q1 acked, the rest refused", acked, busy)
	}
	users := 0
	for _, m := range n.snapshot(t, tok, sid).Messages {
		if m.Role == "user" {
			users++
		}
	}
	if users != 2 {
		t.Fatalf("%d user entries stored, want 2", users)
	}
	// Later the refused id goes through.
	actortest.Eventually(t, "q5 to be accepted once the queue drains", func() bool {
		c.sendMsg("q5", "laptop 5")
		for {
			f := c.read()
			switch {
			case f["type"] == "ack" && f["id"] == "q5":
				return true
			case f["type"] == "error" && f["id"] == "q5":
				time.Sleep(100 * time.Millisecond) // polling interval
				return false
			}
		}
	})
}

// TestSessionsPerUser: one user has at most --max-sessions-per-user live
// sessions on a node. A hello asking for one more is refused with
// rate_limited and 1013; resuming an existing session always works, other
// users are not affected, and a completed session frees its place.
func TestSessionsPerUser(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Actor: actor.Config{MaxSessionsPerUser: 2}})
	alice := nodetest.Token(t, "alice")
	var sids []string
	for range 2 {
		sids = append(sids, liveSession(t, n, alice))
	}
	refused := func(hello map[string]any) {
		t.Helper()
		c := dial(t, n.URL)
		c.send(hello)
		frames := c.expectClose(1013)
		if len(frames) != 1 || frames[0]["code"] != "rate_limited" {
			t.Fatalf("hello %v beyond the limit: %v before 1013, want one rate_limited error", hello, frames)
		}
	}
	refused(map[string]any{"type": "hello", "token": alice})
	// An unknown id would make a new session too: refused alike.
	refused(map[string]any{"type": "hello", "token": alice, "session_id": "ZZZZZZZZZZZZZZZZZZZZZZZZZZ"})
	// Existing sessions resume (both at once), and take sends.
	var conns []*wsc
	for _, sid := range sids {
		c := dial(t, n.URL)
		c.resume(alice, sid, 2)
		c.chat("more", "still works")
		conns = append(conns, c)
	}
	// Bob is not alice.
	b := dial(t, n.URL)
	checkSession(t, b.hello(nodetest.Token(t, "bob"), "", 0), false, "new", 0, 300)
	// Completing one frees a place.
	conns[0].send(map[string]any{"type": "complete"})
	conns[0].readType("completed")
	conns[0].expectClose(1000)
	actortest.Eventually(t, "a new session once one is completed", func() bool {
		c := dial(t, n.URL)
		c.send(map[string]any{"type": "hello", "token": alice})
		f := c.read()
		c.closeNow()
		return f["type"] == "session" && f["reason"] == "new"
	})
}

// walBytes is the size of the store's write-ahead log files: what every
// commit writes before anything else.
func walBytes(t *testing.T, dir string) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Pebble WAL files in %s (%v)", dir, err)
	}
	var total int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
	}
	return total
}

// TestAppendDoesNotRewriteContext: a session holding a 60 KB context
// writes about what one without writes per message: the context is
// written when it changes, not with every append.
func TestAppendDoesNotRewriteContext(t *testing.T) {
	t.Parallel()
	perSend := func(contextBytes int) int64 {
		n := startNode(t, nodetest.Options{Gateway: gateway.Config{NoRateLimit: true}})
		c := dial(t, n.URL)
		c.hello(nodetest.Token(t, "alice"), "", 0)
		if contextBytes > 0 {
			c.send(map[string]any{"type": "context", "set": map[string]any{"blob": strings.Repeat("z", contextBytes)}})
			c.readType("context")
		}
		c.chat("warm", "up")
		before := walBytes(t, n.Dir)
		const sends = 50
		for i := range sends {
			c.chat(fmt.Sprint("m", i), "a short message")
		}
		return (walBytes(t, n.Dir) - before) / sends
	}
	without, with := perSend(0), perSend(60_000)
	t.Logf("log bytes per send: %d without a context, %d with a 60 KB one", without, with)
	if with > without+1024 || with > 8<<10 {
		t.Fatalf("each send writes %d bytes with a 60 KB context, %d without: the context is rewritten", with, without)
	}
}
