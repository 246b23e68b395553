package node_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tether-dev/tether/actor/engine"
)

// partsEngine streams the parts a test hands it, then the reply.
type partsEngine struct {
	parts chan string // "" ends the step with the parts joined as the reply
}

var _ engine.Streamer = (*partsEngine)(nil)

func (e *partsEngine) Next(ctx context.Context, in engine.TurnInput) (engine.Action, error) {
	return e.Stream(ctx, in, func(string) {})
}

func (e *partsEngine) Stream(ctx context.Context, _ engine.TurnInput, part func(string)) (engine.Action, error) {
	text := ""
	for {
		select {
		case <-ctx.Done():
			return engine.Action{}, ctx.Err()
		case p := <-e.parts:
			if p == "" {
				return engine.Action{Reply: text}, nil
			}
			text += p
			part(p)
		}
	}
}

func (e *partsEngine) Tool(string) (engine.Tool, bool) { return engine.Tool{}, false }

// deltaFrom reads frames until a delta and returns it with its first part
// (from, or part when from is absent).
func deltaFrom(c *wsc) (f frame, from int) {
	c.t.Helper()
	f = c.until("delta", nil, func(f frame) bool { return f.Type == "delta" })
	from = f.Part
	if f.From != nil {
		from = *f.From
	}
	return f, from
}

// TestStreamResumeThroughOtherNodes: a reply streaming on the session's
// owner reaches a client attached through another node; the client drops
// mid-reply and resumes through a third node, with and without its
// stream mark: it gets the parts it lacks (from part+1, or the text so
// far as one catch-up delta), the live ones after them, and the final
// message, never a part twice.
func TestStreamResumeThroughOtherNodes(t *testing.T) {
	e := &partsEngine{parts: make(chan string, 16)}
	c := newCluster(t, 3, opts{engine: e, flush: -1})
	tok := token(t, "alice")
	for _, withMark := range []bool{true, false} {
		t.Run(fmt.Sprintf("mark=%v", withMark), func(t *testing.T) {
			first, s := newSession(t, c.nodes[0], tok)
			sid := s.SessionID
			own := owner(t, sid, c.nodes...)
			var via []*tnode // the two nodes that do not own the session
			for _, n := range c.nodes {
				if n != own {
					via = append(via, n)
				}
			}
			first.Drop()
			a := dial(t, via[0])
			if s := a.hello(tok, sid, 0); !s.Resumed {
				t.Fatalf("resume via %s: %s", via[0].id, s.Raw)
			}
			if err := a.Write(sendFrame("m1", "go")); err != nil {
				t.Fatal(err)
			}
			a.until("ack", nil, func(f frame) bool { return f.Type == "ack" && f.ID == "m1" })
			var seq uint64
			for i, p := range []string{"a ", "b ", "c "} {
				e.parts <- p
				d, from := deltaFrom(a)
				if from != i || d.Part != i || d.Text != p {
					t.Fatalf("live delta %d via %s: %s", i, via[0].id, d.Raw)
				}
				seq = d.Seq
			}
			a.Drop()
			e.parts <- "d " // while the client is away

			b := dial(t, via[1])
			h := map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": seq - 1}
			if withMark {
				h["stream"] = map[string]any{"seq": seq, "part": 2}
			}
			if err := b.Write(h); err != nil {
				t.Fatal(err)
			}
			if s := b.until("session", nil, func(f frame) bool { return f.Type == "session" }); !s.Resumed {
				t.Fatalf("resume via %s: %s", via[1].id, s.Raw)
			}
			wantFrom, want := 3, "d "
			if !withMark {
				wantFrom, want = 0, "a b c d "
			}
			d, from := deltaFrom(b)
			got := d.Text
			// The part sent while away may come as its own delta after a
			// catch-up of what came before it.
			for d.Part < 3 {
				d, _ = deltaFrom(b)
				got += d.Text
			}
			if d.Seq != seq || from != wantFrom || d.Part != 3 || got != want {
				t.Fatalf("catch-up via %s: from %d to part %d %q, want from %d %q", via[1].id, from, d.Part, got, wantFrom, want)
			}
			e.parts <- "e"
			if d, from := deltaFrom(b); from != 4 || d.Part != 4 || d.Text != "e" {
				t.Fatalf("live part after the catch-up: %s", d.Raw)
			}
			e.parts <- ""
			m := b.until("final message", nil, func(f frame) bool { return f.Type == "message" && f.Seq == seq })
			if m.Content != "a b c d e" || m.Role != "agent" {
				t.Fatalf("final message %s", m.Raw)
			}
			b.Drop()
		})
	}
}
