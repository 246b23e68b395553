package client

import (
	"regexp"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/wire"
)

func delta(seq uint64, from, part int, text string) wire.Delta {
	d := wire.Delta{Type: wire.TypeDelta, Seq: seq, Part: part, Text: text}
	if from != part {
		d.From = &from
	}
	return d
}

func agentMsg(seq uint64, content string) wire.Message {
	m := msg(seq)
	m.Content = content
	return m
}

// nextPartial reads the next Partial.
func nextPartial(t *testing.T, c *Client) Partial {
	t.Helper()
	select {
	case p, ok := <-c.Partials():
		if !ok {
			t.Fatalf("Partials closed (err %v)", c.Err())
		}
		return p
	case <-time.After(wait):
		t.Fatal("no Partial in time")
		return Partial{}
	}
}

func wantPartial(t *testing.T, got Partial, want Partial) {
	t.Helper()
	if got != want {
		t.Fatalf("Partial %+v, want %+v", got, want)
	}
}

// TestDeltaRules: parts extend the reply, from:0 replaces it, a delta
// that leaves a hole is ignored, the message supersedes the parts, and a
// delta for a seq after its message is ignored.
func TestDeltaRules(t *testing.T) {
	step := make(chan struct{})
	f := newFake(t, func(_ int, ws *websocket.Conn, _ wire.ClientFrame) {
		send(ws, sessionFrame(false, "new", 0))
		for _, fr := range []any{
			delta(1, 0, 0, "Hel"),
			delta(1, 1, 1, "lo"),
			delta(1, 0, 1, "Hi"), // the turn ran again: replaces "Hello"
			delta(1, 2, 3, " there"),
		} {
			send(ws, fr)
			<-step
		}
		send(ws, delta(1, 5, 5, "HOLE")) // parts 4 missing: ignored
		send(ws, delta(1, 4, 4, "!"))
		<-step
		send(ws, agentMsg(1, "Hi there!"))
		send(ws, delta(1, 5, 5, "late")) // after its message: ignored
		send(ws, delta(2, 0, 0, "next"))
		drain(ws)
	})
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t"})
	for _, want := range []Partial{
		{Seq: 1, Part: 0, Text: "Hel"},
		{Seq: 1, Part: 1, Text: "Hello"},
		{Seq: 1, Part: 1, Text: "Hi", Restart: true},
		{Seq: 1, Part: 3, Text: "Hi there"},
		{Seq: 1, Part: 4, Text: "Hi there!"},
	} {
		wantPartial(t, nextPartial(t, c), want)
		step <- struct{}{}
	}
	if m := collect(t, c, 1)[0]; m.Seq != 1 || m.Content != "Hi there!" {
		t.Fatalf("entry %+v", m)
	}
	wantPartial(t, nextPartial(t, c), Partial{Seq: 2, Part: 0, Text: "next"})
}

// TestDeltaResume: the hello after a drop names the parts held (stream),
// the server goes on from the next part; once the message is in, a
// later hello names none, and a catch-up from 0 is taken as it is.
func TestDeltaResume(t *testing.T) {
	hellos := make(chan wire.ClientFrame, 3)
	step := make(chan struct{})
	f := newFake(t, func(n int, ws *websocket.Conn, hello wire.ClientFrame) {
		hellos <- hello
		switch n {
		case 0:
			send(ws, sessionFrame(false, "new", 0))
			send(ws, delta(1, 0, 0, "a"))
			<-step
			send(ws, delta(1, 1, 1, "b"))
			<-step
			ws.Close() // the network fails
			return
		case 1:
			resumed(ws, 0)
			send(ws, delta(1, 2, 2, "c"))
			<-step
			send(ws, agentMsg(1, "abc"))
		case 2:
			resumed(ws, 1)
			send(ws, delta(2, 0, 1, "xy")) // a catch-up: parts 0..1
		}
		drain(ws)
	})
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t"})
	if h := <-hellos; h.Stream != nil {
		t.Fatalf("first hello has stream %+v", h.Stream)
	}
	wantPartial(t, nextPartial(t, c), Partial{Seq: 1, Part: 0, Text: "a"})
	step <- struct{}{}
	wantPartial(t, nextPartial(t, c), Partial{Seq: 1, Part: 1, Text: "ab"})
	step <- struct{}{}
	if h := <-hellos; h.SessionID != "S" || h.LastSeq != 0 || h.Stream == nil || *h.Stream != (wire.StreamMark{Seq: 1, Part: 1}) {
		t.Fatalf("resume hello %+v (stream %+v), want stream {1 1}", h, h.Stream)
	}
	wantPartial(t, nextPartial(t, c), Partial{Seq: 1, Part: 2, Text: "abc"})
	step <- struct{}{}
	if m := collect(t, c, 1)[0]; m.Content != "abc" {
		t.Fatalf("entry %+v", m)
	}
	c.Drop()
	if h := <-hellos; h.Stream != nil || h.LastSeq != 1 {
		t.Fatalf("hello after the message %+v (stream %+v), want last_seq 1 and no stream", h, h.Stream)
	}
	wantPartial(t, nextPartial(t, c), Partial{Seq: 2, Part: 1, Text: "xy"})
}

// TestChatStreaming: Chat prints a streamed reply as it grows, on one
// line, then the entry.
func TestChatStreaming(t *testing.T) {
	step := make(chan struct{})
	f := newFake(t, func(_ int, ws *websocket.Conn, _ wire.ClientFrame) {
		send(ws, sessionFrame(false, "new", 0))
		for _, fr := range []any{delta(1, 0, 0, "Hello"), delta(1, 1, 1, ", wor"), delta(1, 2, 2, "ld")} {
			send(ws, fr)
			<-step
		}
		send(ws, agentMsg(1, "Hello, world"))
		drain(ws)
	})
	r := startChat(t, ChatConfig{Client: Config{URLs: []string{f.url()}, Token: "t"}})
	for _, shown := range []string{"Hello", "Hello, wor", "Hello, world"} {
		r.waitFor(`\(streaming\): ` + regexp.QuoteMeta(shown))
		step <- struct{}{}
	}
	r.waitFor(`\[1\] agent: Hello, world`)
	wantLines(t, r.lines()[1:], []string{"[1] agent (streaming): Hello, world", "[1] agent: Hello, world"})
}
