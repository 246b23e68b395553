package client

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
)

// chatLines runs Chat on script and returns its output with the first
// session id found in it replaced by <sid> (and a second by <sid2>).
func chatLines(t *testing.T, cfg Config, script string) ([]string, []string) {
	t.Helper()
	cfg.MinBackoff = 5 * time.Millisecond
	var out bytes.Buffer
	if err := Chat(ctxT(t), cfg, strings.NewReader(script), &out); err != nil {
		t.Fatalf("Chat: %v\noutput:\n%s", err, out.String())
	}
	text := out.String()
	ids := regexp.MustCompile(`session ([A-Z0-9]{20,})`).FindAllStringSubmatch(text, -1)
	var sids []string
	for _, m := range ids {
		if len(sids) == 0 || sids[len(sids)-1] != m[1] {
			sids = append(sids, m[1])
		}
	}
	for i, sid := range sids {
		tag := "<sid>"
		if i > 0 {
			tag = "<sid2>"
		}
		text = strings.ReplaceAll(text, sid, tag)
	}
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n"), sids
}

func wantLines(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("output:\n%s\n\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestChat(t *testing.T) {
	n := newNode(t, nodeOpts{})
	cfg := Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)}
	got, sids := chatLines(t, cfg, `hello
/context goal=test lang=zh
/history 2

/drop
again
/bogus
/complete
never sent
`)
	wantLines(t, got, []string{
		"session <sid> started",
		"[1] user: hello",
		"[2] agent: Agent reply: hello",
		`context: {"goal":"test","lang":"zh"}`,
		"history: 2 entries",
		"  [1] user: hello",
		"  [2] agent: Agent reply: hello",
		"dropping the connection",
		"reconnected: session <sid> resumed (server at seq 2)",
		"[3] user: again",
		"[4] agent: Agent reply: again",
		"unknown command /bogus; " + ChatHelp,
		"session <sid> completed",
	})

	// The completed session cannot be resumed: Chat says so and goes on in
	// the new one; /quit leaves it resumable.
	cfg.SessionID, cfg.LastSeq = sids[0], 4
	got, _ = chatLines(t, cfg, "hi\n/quit\nnever sent\n")
	wantLines(t, got, []string{
		"session <sid> could not be resumed (completed); continuing in new session <sid2>",
		"session <sid2> resumed (server at seq 0)",
		"[1] user: hi",
		"[2] agent: Agent reply: hi",
		"left session <sid2>; it stays resumable for a while",
	})
}

func TestChatToolEntries(t *testing.T) {
	n := newNode(t, nodeOpts{engine: actor.NewDemo(actor.DemoConfig{SearchDelay: 30 * time.Millisecond})})
	got, _ := chatLines(t, Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)}, "laptops\n/quit\n")
	wantLines(t, got, []string{
		"session <sid> started",
		"[1] user: laptops",
		"[2] tool: search started",
		`[3] tool: search completed: Found 3 results for "laptops".`,
		`[4] agent: I searched for "laptops". Found 3 results for "laptops".`,
		"left session <sid>; it stays resumable for a while",
	})
}
