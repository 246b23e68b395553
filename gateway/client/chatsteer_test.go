package client

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
)

// TestChatSteer: /approve and /deny decide the call waiting for approval,
// /stop cancels the reply streaming; each says so when there is nothing
// to act on.
func TestChatSteer(t *testing.T) {
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 30 * time.Millisecond, StreamDelay: 150 * time.Millisecond})
	n := newNode(t, nodeOpts{engine: demo})
	r := startChat(t, ChatConfig{Client: Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)}})
	r.waitFor(`session \w+ started`)
	r.typeLine("/approve")
	r.waitFor(`/approve: no tool call is waiting for your approval`)
	r.typeLine("/stop")
	r.waitFor(`/stop: no turn is running`)
	r.typeLine("/deny now")
	r.waitFor(`/deny takes no argument`)

	r.typeLine("book a table")
	r.waitFor(`\[2\] tool: booking awaiting_approval \{"request":"book a table"\}\ntool booking is waiting for your approval: /approve or /deny\n`)
	r.typeLine("/approve")
	r.waitFor(`\[6\] agent: Booked: confirmation for "book a table"\n`)

	r.typeLine("book a room")
	r.waitFor(`\[8\] tool: booking awaiting_approval`)
	r.typeLine("/deny")
	r.waitFor(`\[10\] agent: You declined the booking`)
	r.typeLine("/deny")
	r.waitFor(`(?s)\[10\] agent.*/deny: no tool call is waiting for your approval`)

	r.typeLine("laptops")
	r.waitFor(`\[14\] agent \(streaming\): I `)
	r.typeLine("/stop")
	r.waitFor(`\[14\] agent \(cancelled\): I `)
	r.typeLine("/quit")
	if err := r.wait(); err != nil {
		t.Fatal(err)
	}
	text := r.out.String()
	want := []string{
		"[1] user: book a table",
		`[2] tool: booking awaiting_approval {"request":"book a table"}`,
		"tool booking is waiting for your approval: /approve or /deny",
		"[3] tool: booking approved by alice",
		"[4] tool: booking started",
		`[5] tool: booking completed: confirmation for "book a table"`,
		"[7] user: book a room",
		"[9] tool: booking denied by alice",
		"[11] user: laptops",
		"stopping the running turn",
	}
	at := 0
	for _, w := range want {
		i := strings.Index(text[at:], w+"\n")
		if i < 0 {
			t.Fatalf("no %q (in order) in:\n%s", w, text)
		}
		at += i
	}
	if !strings.Contains(text, "\napproved tool booking\n") || !strings.Contains(text, "\ndenied tool booking\n") {
		t.Fatalf("the decisions were not confirmed:\n%s", text)
	}
	if demo.Runs("booking") != 1 {
		t.Fatalf("booking ran %d times, want 1 (the denied one never runs)", demo.Runs("booking"))
	}
	if strings.Contains(text, "[15] agent") {
		t.Fatalf("the stopped turn went on:\n%s", text)
	}
}

// TestChatShared: two chats on one session both stay live; a call
// waiting for approval is shown to a chat that joins later, which can
// decide it, and the first sees the decision.
func TestChatShared(t *testing.T) {
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 30 * time.Millisecond})
	n := newNode(t, nodeOpts{engine: demo})
	cfg := Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)}
	a := startChat(t, ChatConfig{Client: cfg})
	sid := regexp.MustCompile(`session (\w+) started`).FindStringSubmatch(a.waitFor(`session \w+ started`))[1]
	a.typeLine("book a car")
	a.waitFor(`tool booking is waiting for your approval`)

	cfg.SessionID, cfg.LastSeq = sid, 2 // past the waiting call's entry
	b := startChat(t, ChatConfig{Client: cfg})
	b.waitFor(`session \w+ resumed, 0 new since seq 2 — type a message, /help for commands\ntool booking is waiting for your approval: /approve or /deny\n`)
	b.typeLine("/approve")
	for _, r := range []*chatRun{a, b} {
		r.waitFor(`\[3\] tool: booking approved by alice`)
		r.waitFor(`\[6\] agent: Booked: confirmation for "book a car"`)
	}
	a.typeLine("/approve")
	a.waitFor(`/approve: no tool call is waiting for your approval`)
	b.typeLine("from b")
	a.waitFor(`\[7\] user: from b\n(.*\n)*\[10\] agent: I searched for "from b"`)
	a.typeLine("from a")
	b.waitFor(`\[11\] user: from a\n`)
	for _, r := range []*chatRun{a, b} {
		r.waitFor(`\[14\] agent: I searched for "from a"`)
		r.typeLine("/quit")
		if err := r.wait(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(r.out.String(), "another connection") {
			t.Fatalf("a chat was superseded:\n%s", r.out.String())
		}
	}

	// The whole transcript again: the call decided since is not shown as
	// waiting.
	cfg.LastSeq = 0
	c := startChat(t, ChatConfig{Client: cfg})
	c.waitFor(`\[14\] agent: I searched for "from a"`)
	c.typeLine("/approve")
	c.waitFor(`/approve: no tool call is waiting for your approval`)
	if text := c.out.String(); strings.Contains(text, "is waiting for your approval:") ||
		!strings.Contains(text, `[2] tool: booking awaiting_approval {"request":"book a car"}`) {
		t.Fatalf("transcript:\n%s", text)
	}
}
