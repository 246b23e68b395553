package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// scriptEngine streams what the test tells it: each step reads commands
// from steps until one ends the step (a reply or a tool call).
type scriptEngine struct {
	steps chan cmd
	tool  chan string // results of the "slow" tool, one per run
}

type cmd struct {
	part  string
	reply *string
	call  string
}

var _ engine.Streamer = (*scriptEngine)(nil)

func newScript() *scriptEngine {
	return &scriptEngine{steps: make(chan cmd, 64), tool: make(chan string, 4)}
}

func (e *scriptEngine) Next(ctx context.Context, in engine.TurnInput) (engine.Action, error) {
	return e.Stream(ctx, in, func(string) {})
}

func (e *scriptEngine) Stream(ctx context.Context, _ engine.TurnInput, part func(string)) (engine.Action, error) {
	for {
		select {
		case <-ctx.Done():
			return engine.Action{}, ctx.Err()
		case c := <-e.steps:
			switch {
			case c.reply != nil:
				return engine.Action{Reply: *c.reply}, nil
			case c.call != "":
				return engine.Action{Call: &engine.Call{Name: c.call}}, nil
			default:
				part(c.part)
			}
		}
	}
}

func (e *scriptEngine) Tool(name string) (engine.Tool, bool) {
	if name != "slow" {
		return engine.Tool{}, false
	}
	return engine.Tool{Name: name, Run: func(ctx context.Context, _ map[string]any, _ func(string)) (string, error) {
		select {
		case r := <-e.tool:
			return r, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}}, true
}

func (e *scriptEngine) parts(ps ...string) {
	for _, p := range ps {
		e.steps <- cmd{part: p}
	}
}

func (e *scriptEngine) finish(reply string) { e.steps <- cmd{reply: &reply} }

// delta reads frames until a delta and returns (seq, from, part, text).
func (c *wsc) delta() (uint64, int, int, string) {
	c.t.Helper()
	f := c.readType("delta")
	from := int(num(c.t, f["part"]))
	if v, ok := f["from"]; ok {
		from = int(num(c.t, v))
	}
	return num(c.t, f["seq"]), from, int(num(c.t, f["part"])), str(c.t, f["text"])
}

func streamNode(t *testing.T, e *scriptEngine, flush time.Duration) *node {
	return startNode(t, nodetest.Options{Actor: actor.Config{Engine: e, FlushInterval: flush}})
}

// deltaRaw reads frames until a delta and returns it as sent.
func (c *wsc) deltaRaw() map[string]any {
	c.t.Helper()
	return c.readType("delta")
}

// TestStreamDeltas: parts go out as deltas of the seq the reply becomes,
// the first with an explicit from:0, and the message supersedes them with
// the parts joined.
func TestStreamDeltas(t *testing.T) {
	t.Parallel()
	e := newScript()
	n := streamNode(t, e, -1)
	c := dial(t, n.URL)
	c.hello(nodetest.Token(t, "alice"), "", 0)
	c.sendMsg("m1", "tell me")
	c.ackOf("m1")
	c.message(1, "user")
	words := []string{"Once ", "upon ", "a ", "time."}
	for i, w := range words {
		e.parts(w)
		f := c.deltaRaw()
		if _, ok := f["from"]; i == 0 && !ok {
			t.Fatalf("the first delta has no from: %v", f)
		}
		if num(t, f["seq"]) != 2 || num(t, f["part"]) != uint64(i) || f["text"] != w {
			t.Fatalf("delta %d: %v", i, f)
		}
	}
	e.finish(strings.Join(words, ""))
	if m := c.message(2, "agent"); m["content"] != strings.Join(words, "") {
		t.Fatalf("final message %v", m)
	}
}

// resumeStream resumes with an optional stream mark and returns what came
// after the history_batch up to and including the final agent message.
func resumeStream(t *testing.T, n *node, tok, sid string, last uint64, mark map[string]any) *wsc {
	t.Helper()
	c := dial(t, n.URL)
	h := map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": last}
	if mark != nil {
		h["stream"] = mark
	}
	c.send(h)
	c.readType("session")
	c.readType("history_batch")
	return c
}

// TestStreamResumeMidReply: a client that held parts 0..2 and resumes
// with stream {seq, part: 2} gets the parts made while it was away as one
// delta from part 3, then the live ones; no part twice; the message is
// the parts joined. Without a mark, it gets one catch-up delta from 0.
func TestStreamResumeMidReply(t *testing.T) {
	t.Parallel()
	for _, withMark := range []bool{true, false} {
		t.Run(fmt.Sprintf("mark=%v", withMark), func(t *testing.T) {
			e := newScript()
			n := streamNode(t, e, -1)
			tok := nodetest.Token(t, "alice")
			c := dial(t, n.URL)
			sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
			c.sendMsg("m1", "go")
			c.ackOf("m1")
			c.message(1, "user")
			for _, w := range []string{"a ", "b ", "c "} {
				e.parts(w)
				c.delta()
			}
			c.closeNow()
			n.waitStatus(t, tok, sid, "interrupted")
			e.parts("d ", "e ") // while away
			var mark map[string]any
			if withMark {
				mark = map[string]any{"seq": 2, "part": 2}
			}
			c2 := resumeStream(t, n, tok, sid, 1, mark)
			seq, from, part, text := c2.delta()
			wantFrom, wantText := 3, "d e "
			if !withMark {
				wantFrom, wantText = 0, "a b c d e "
			}
			// The engine may still be handing over d and e: take what came.
			for part < 4 {
				_, _, p2, t2 := c2.delta()
				part, text = p2, text+t2
			}
			if seq != 2 || from != wantFrom || part != 4 || text != wantText {
				t.Fatalf("catch-up: seq %d from %d part %d %q, want from %d %q", seq, from, part, text, wantFrom, wantText)
			}
			e.parts("f")
			if _, from, part, text := c2.delta(); from != 5 || part != 5 || text != "f" {
				t.Fatalf("live part after the catch-up: from %d part %d %q", from, part, text)
			}
			e.finish("a b c d e f")
			if m := c2.message(2, "agent"); m["content"] != "a b c d e f" {
				t.Fatalf("final message %v", m)
			}
		})
	}
}

// TestStreamSplitBySend: a user's send during a reply ends that reply's
// entry with the text so far; the send takes the next seq; the rest of
// the reply streams as a new entry (its deltas from 0) and its message
// holds only the rest.
func TestStreamSplitBySend(t *testing.T) {
	t.Parallel()
	e := newScript()
	n := streamNode(t, e, -1)
	c := dial(t, n.URL)
	c.hello(nodetest.Token(t, "alice"), "", 0)
	c.sendMsg("m1", "go")
	c.ackOf("m1")
	c.message(1, "user")
	e.parts("first ", "half ")
	for part := -1; part < 1; { // the two may come merged
		_, _, part, _ = c.delta()
	}
	c.sendMsg("m2", "wait")
	if m := c.message(2, "agent"); m["content"] != "first half " {
		t.Fatalf("the reply so far: %v", m)
	}
	if c.ackOf("m2") != 3 {
		t.Fatal("the send does not follow the split reply")
	}
	c.message(3, "user")
	e.parts("second ")
	if seq, from, _, text := c.delta(); seq != 4 || from != 0 || text != "second " {
		t.Fatalf("after the split: seq %d from %d %q", seq, from, text)
	}
	e.finish("first half second half")
	if m := c.message(4, "agent"); m["content"] != "second half" {
		t.Fatalf("the rest of the reply: %v", m)
	}
}

// TestStreamToolInsideTurn: text streamed before a tool call is logged as
// the agent's entry before the call; a drop during the tool is resumed
// with the tool's result and the reply that follows, streamed.
func TestStreamToolInsideTurn(t *testing.T) {
	t.Parallel()
	e := newScript()
	n := streamNode(t, e, -1)
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.sendMsg("m1", "look it up")
	c.ackOf("m1")
	c.message(1, "user")
	e.parts("Let me check. ")
	c.delta()
	e.steps <- cmd{call: "slow"}
	if m := c.message(2, "agent"); m["content"] != "Let me check. " {
		t.Fatalf("text before the call: %v", m)
	}
	if m := c.message(3, "tool"); obj(t, m["metadata"])["status"] != "started" {
		t.Fatalf("tool entry %v", m)
	}
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")
	e.tool <- "found it"
	e.parts("It is ", "there.")
	c2 := resumeStream(t, n, tok, sid, 3, nil)
	_ = c2
	e.finish("It is there.")
	// Whatever came live or in the batch, the log holds it in order.
	actortest.Eventually(t, "the reply after the tool", func() bool {
		return n.snapshot(t, tok, sid).LastSeq == 5
	})
	msgs := n.snapshot(t, tok, sid).Messages
	if len(msgs) != 5 || msgs[3].Role != "tool" || msgs[3].Metadata["status"] != "completed" || msgs[4].Content != "It is there." {
		t.Fatalf("log after the tool: %+v", msgs)
	}
}

// TestStreamCoalesced: parts that come faster than the flush interval go
// out together: a reply of 200 parts reaches the client in far fewer
// deltas, which joined in order are the message.
func TestStreamCoalesced(t *testing.T) {
	t.Parallel()
	e := newScript()
	n := streamNode(t, e, 50*time.Millisecond)
	c := dial(t, n.URL)
	c.hello(nodetest.Token(t, "alice"), "", 0)
	c.sendMsg("m1", "go")
	c.ackOf("m1")
	c.message(1, "user")
	var want strings.Builder
	for i := range 200 {
		p := fmt.Sprintf("w%d ", i)
		want.WriteString(p)
		e.parts(p)
	}
	e.finish(want.String())
	var got strings.Builder
	deltas, next := 0, 0
	for {
		f := c.read()
		if f["type"] == "message" {
			if f["content"] != want.String() || got.String() != want.String()[:got.Len()] {
				t.Fatalf("deltas %q are not a prefix of the message %v", got.String(), f["content"])
			}
			break
		}
		if f["type"] != "delta" {
			t.Fatalf("unexpected %v", f)
		}
		from := int(num(t, f["part"]))
		if v, ok := f["from"]; ok {
			from = int(num(t, v))
		}
		if from != next {
			t.Fatalf("delta from %d, want %d", from, next)
		}
		next = int(num(t, f["part"])) + 1
		got.WriteString(str(t, f["text"]))
		deltas++
	}
	if deltas > 20 {
		t.Fatalf("200 parts in %d deltas: not coalesced", deltas)
	}
	t.Logf("200 parts in %d deltas", deltas)
}

// TestStreamSlowClientMerged: with no flush interval, a client that reads
// slower than the parts come still gets fewer, larger deltas: parts that
// wait in its queue are merged, contiguous, joined in order.
func TestStreamSlowClientMerged(t *testing.T) {
	t.Parallel()
	e := newScript()
	n := startNode(t, nodetest.Options{Actor: actor.Config{Engine: e, FlushInterval: -1}, SendBuffer: 16 << 10})
	c := dialSmall(t, n.URL, 16<<10)
	c.hello(nodetest.Token(t, "alice"), "", 0)
	c.sendMsg("m1", "go")
	c.ackOf("m1")
	c.message(1, "user")
	const parts = 300
	chunk := strings.Repeat("x", 1000)
	var want strings.Builder
	for i := range parts {
		p := fmt.Sprintf("%03d%s ", i, chunk)
		want.WriteString(p)
		e.parts(p)
	}
	e.finish(want.String())
	// Read only now: the server's writer was stuck meanwhile.
	var got strings.Builder
	deltas, next := 0, 0
	for {
		f := c.read()
		if f["type"] == "message" {
			break
		}
		from := int(num(t, f["part"]))
		if v, ok := f["from"]; ok {
			from = int(num(t, v))
		}
		if f["type"] != "delta" || from != next {
			t.Fatalf("unexpected %v (want from %d)", f["type"], next)
		}
		next = int(num(t, f["part"])) + 1
		got.WriteString(str(t, f["text"]))
		deltas++
	}
	if !strings.HasPrefix(want.String(), got.String()) {
		t.Fatal("the deltas joined are not a prefix of the reply")
	}
	if deltas >= parts/2 {
		t.Fatalf("%d parts reached a slow client in %d deltas: not merged", parts, deltas)
	}
	t.Logf("%d parts in %d deltas", parts, deltas)
}
