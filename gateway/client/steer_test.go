package client

import (
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/gateway/wire"
)

// until reads c.Messages until one satisfies ok, and returns all read.
func until(t *testing.T, c *Client, what string, ok func(wire.Message) bool) []wire.Message {
	t.Helper()
	timeout := time.After(wait)
	var out []wire.Message
	for {
		select {
		case m, open := <-c.Messages():
			if !open {
				t.Fatalf("Messages closed before %s (err %v); got %+v", what, c.Err(), out)
			}
			out = append(out, m)
			if ok(m) {
				return out
			}
		case <-timeout:
			t.Fatalf("no %s in time; got %+v", what, out)
		}
	}
}

func toolStatus(m wire.Message, status string) bool {
	return m.Role == wire.RoleTool && m.Metadata["status"] == status
}

// TestCancelMidStream: a cancel while the reply streams ends the turn; the
// text streamed so far becomes its agent entry, marked cancelled.
func TestCancelMidStream(t *testing.T) {
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 30 * time.Millisecond, StreamDelay: 150 * time.Millisecond})
	n := newNode(t, nodeOpts{engine: demo})
	c := dial(t, Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)})
	ctx := ctxT(t)
	if _, err := c.Send(ctx, "laptops", nil); err != nil {
		t.Fatal(err)
	}
	got := until(t, c, "search completed", func(m wire.Message) bool { return toolStatus(m, "completed") })
	p := nextPartial(t, c) // the reply streams, a word every 150ms
	if p.Seq != got[len(got)-1].Seq+1 || p.Text == "" {
		t.Fatalf("partial %+v after %+v", p, got)
	}
	if err := c.Cancel(ctx, 0); err != nil {
		t.Fatal(err)
	}
	rest := until(t, c, "the agent entry", func(m wire.Message) bool { return m.Role == wire.RoleAgent })
	contiguous(t, append(got, rest...), 1)
	a := rest[len(rest)-1]
	const full = `I searched for "laptops". Found 3 results for "laptops".`
	if a.Metadata["cancelled"] != true || !strings.HasPrefix(a.Content, p.Text) || !strings.HasPrefix(full, a.Content) || a.Content == full {
		t.Fatalf("agent entry %+v; want a cancelled prefix of %q holding %q", a, full, p.Text)
	}
	// The session goes on: the next message gets a whole reply.
	if _, err := c.Send(ctx, "again", nil); err != nil {
		t.Fatal(err)
	}
	last := until(t, c, "the next reply", func(m wire.Message) bool { return m.Role == wire.RoleAgent })
	if r := last[len(last)-1]; r.Metadata["cancelled"] != nil || !strings.HasPrefix(r.Content, `I searched for "again"`) {
		t.Fatalf("next reply %+v", r)
	}
	// A cancel with nothing running does nothing and is no error.
	if err := c.Cancel(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

// TestInterrupt: a send with interrupt stops the turn running and is
// answered next.
func TestInterrupt(t *testing.T) {
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 5 * time.Second})
	n := newNode(t, nodeOpts{engine: demo})
	c := dial(t, Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)})
	ctx := ctxT(t)
	if _, err := c.Send(ctx, "slow", nil); err != nil {
		t.Fatal(err)
	}
	until(t, c, "search started", func(m wire.Message) bool { return toolStatus(m, "started") })
	seq, err := c.Interrupt(ctx, "hotels", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := until(t, c, "the interrupting message", func(m wire.Message) bool { return m.Seq == seq })
	var failed bool
	for _, m := range got {
		failed = failed || toolStatus(m, "failed") && m.Content == "cancelled"
	}
	if !failed {
		t.Fatalf("the running search was not logged failed \"cancelled\": %+v", got)
	}
	until(t, c, "search for hotels started", func(m wire.Message) bool {
		return toolStatus(m, "started") && m.Metadata["reply_to"] == float64(seq)
	})
}

// approvalSession sends a booking request and returns the call waiting
// for approval.
func approvalSession(t *testing.T) (*engine.Demo, *Client, wire.Message) {
	t.Helper()
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 30 * time.Millisecond})
	n := newNode(t, nodeOpts{engine: demo})
	c := dial(t, Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)})
	if _, err := c.Send(ctxT(t), "book a table for two", nil); err != nil {
		t.Fatal(err)
	}
	got := until(t, c, "the call awaiting approval", func(m wire.Message) bool { return toolStatus(m, "awaiting_approval") })
	w := got[len(got)-1]
	args, _ := w.Metadata["args"].(map[string]any)
	if w.Metadata["name"] != "booking" || w.Metadata["call_id"] == "" || args["request"] != "book a table for two" {
		t.Fatalf("waiting call %+v", w)
	}
	return demo, c, w
}

// TestApprove: an approved call is logged approved, then runs.
func TestApprove(t *testing.T) {
	demo, c, w := approvalSession(t)
	id := w.Metadata["call_id"].(string)
	if err := c.Approve(ctxT(t), id, true); err != nil {
		t.Fatal(err)
	}
	got := until(t, c, "the reply", func(m wire.Message) bool { return m.Role == wire.RoleAgent })
	contiguous(t, got, w.Seq+1)
	var statuses []string
	for _, m := range got[:len(got)-1] {
		if m.Role != wire.RoleTool || m.Metadata["call_id"] != id {
			t.Fatalf("entry %+v", m)
		}
		statuses = append(statuses, m.Metadata["status"].(string))
	}
	if strings.Join(statuses, " ") != "approved started completed" || got[0].Metadata["by"] != "alice" {
		t.Fatalf("statuses %v, decision %+v", statuses, got[0])
	}
	if r := got[len(got)-1].Content; r != `Booked: confirmation for "book a table for two"` {
		t.Fatalf("reply %q", r)
	}
	if runs := demo.Runs("booking"); runs != 1 {
		t.Fatalf("booking ran %d times", runs)
	}
}

// TestDeny: a denied call never runs; the agent goes on knowing; a second
// decision changes nothing.
func TestDeny(t *testing.T) {
	demo, c, w := approvalSession(t)
	id := w.Metadata["call_id"].(string)
	ctx := ctxT(t)
	if err := c.Approve(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	got := collect(t, c, 2)
	contiguous(t, got, w.Seq+1)
	if !toolStatus(got[0], "denied") || got[0].Metadata["call_id"] != id || got[0].Metadata["by"] != "alice" ||
		got[1].Role != wire.RoleAgent || !strings.HasPrefix(got[1].Content, "You declined the booking") {
		t.Fatalf("after the denial: %+v", got)
	}
	if err := c.Approve(ctx, id, true); err != nil { // the first decision stands
		t.Fatal(err)
	}
	seq, err := c.Send(ctx, "laptops", nil)
	if err != nil {
		t.Fatal(err)
	}
	next := collect(t, c, 1)
	if next[0].Seq != seq || next[0].Seq != got[1].Seq+1 {
		t.Fatalf("after a second decision: %+v, want the user entry %d next", next[0], seq)
	}
	until(t, c, "the search's reply", func(m wire.Message) bool { return m.Role == wire.RoleAgent })
	if runs := demo.Runs("booking"); runs != 0 {
		t.Fatalf("a denied booking ran %d times", runs)
	}
	if err := c.Approve(ctx, "", true); err == nil {
		t.Fatal("Approve with no call id succeeded")
	}
}

// rawShared is a bare WebSocket attached shared to sid, to see exactly
// which frames one connection of several gets.
func rawShared(t *testing.T, n *node, sid string, last uint64) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(n.url(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	if err := ws.WriteJSON(wire.ClientFrame{Type: wire.TypeHello, Token: n.token(t, "alice", 0), SessionID: sid,
		LastSeq: last, Attach: wire.AttachShared}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{wire.TypeSession, wire.TypeHistoryBatch} {
		if f := rawNext(t, ws); f["type"] != want {
			t.Fatalf("got %v, want %s", f, want)
		}
	}
	return ws
}

func rawNext(t *testing.T, ws *websocket.Conn) map[string]any {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(wait))
	var f map[string]any
	if err := ws.ReadJSON(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestShared: clients attached shared to one session all stay live: each
// sees every entry, whoever sent it, gap-free and once; an ack goes only
// to its sender; a shared client's reconnect supersedes no one.
func TestShared(t *testing.T) {
	n := newNode(t, nodeOpts{})
	tok := n.token(t, "alice", 0)
	a := dial(t, Config{URLs: []string{n.url()}, Token: tok, Shared: true})
	ctx := ctxT(t)
	if _, err := a.Send(ctx, "first", nil); err != nil {
		t.Fatal(err)
	}
	contiguous(t, collect(t, a, 2), 1)
	b := dial(t, Config{URLs: []string{n.url()}, Token: tok, SessionID: a.SessionID(), LastSeq: 2, Shared: true})
	raw := rawShared(t, n, a.SessionID(), 2)

	seqA, err := a.Send(ctx, "from a", nil)
	if err != nil {
		t.Fatal(err)
	}
	seqB, err := b.Send(ctx, "from b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if seqA != 3 || seqB != 5 {
		t.Fatalf("seqs %d, %d; want 3, 5 (each send after the other's reply)", seqA, seqB)
	}
	// The raw connection sent nothing: it gets the four entries and no ack.
	for want := uint64(3); want <= 6; want++ {
		f := rawNext(t, raw)
		if f["type"] != wire.TypeMessage || f["seq"] != float64(want) {
			t.Fatalf("raw connection got %v, want message %d", f, want)
		}
	}
	if err := raw.WriteJSON(wire.ClientFrame{Type: wire.TypeSend, ID: "r-1", Content: "from raw"}); err != nil {
		t.Fatal(err)
	}
	if f := rawNext(t, raw); f["type"] != wire.TypeAck || f["id"] != "r-1" || f["seq"] != float64(7) {
		t.Fatalf("raw connection got %v, want its ack", f)
	}

	// b drops and resumes, shared: a stays attached and live.
	b.Drop()
	waitUntil(t, "b's resume", func() bool { return b.Stats().Reconnects == 1 })
	if _, err := b.Send(ctx, "after the drop", nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Client{a, b} {
		got := collect(t, c, 8)
		contiguous(t, got, 3)
		for i, want := range []string{"from a", "from b", "from raw", "after the drop"} {
			if m := got[2*i]; m.Role != wire.RoleUser || m.Content != want || got[2*i+1].Content != "Agent reply: "+want {
				t.Fatalf("entries %+v", got)
			}
		}
		if st := c.Stats(); st.Gaps != 0 || st.Duplicates != 0 || c.Err() != nil {
			t.Fatalf("stats %+v, err %v", st, c.Err())
		}
	}
	if st := a.Stats(); st.Reconnects != 0 {
		t.Fatalf("a reconnected: %+v", st)
	}
}
