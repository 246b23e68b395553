package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
)

// syncBuf is Chat's output, safe to read while Chat writes it.
type syncBuf struct {
	mu     sync.Mutex
	b      bytes.Buffer
	change chan struct{} // closed and replaced on every write
}

func newSyncBuf() *syncBuf { return &syncBuf{change: make(chan struct{})} }

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.change)
	s.change = make(chan struct{})
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// chatRun is Chat running on a pipe the test types into.
type chatRun struct {
	t    *testing.T
	in   *io.PipeWriter
	out  *syncBuf
	done chan error
	err  error
	over bool
}

func startChat(t *testing.T, cfg ChatConfig) *chatRun {
	t.Helper()
	if cfg.Client.Logger == nil {
		cfg.Client.Logger = quiet
	}
	if cfg.Client.MinBackoff == 0 {
		cfg.Client.MinBackoff = 5 * time.Millisecond
	}
	pr, pw := io.Pipe()
	r := &chatRun{t: t, in: pw, out: newSyncBuf(), done: make(chan error, 1)}
	cfg.In, cfg.Out = pr, r.out
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.done <- Chat(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		pw.Close()
		r.wait()
	})
	return r
}

// typeLine types a line; Chat reads input all the time, so this does not
// wait for anything else.
func (r *chatRun) typeLine(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		r.t.Fatalf("typing %q: %v\noutput:\n%s", line, err, r.out.String())
	}
}

// waitFor waits until the output matches re (a regexp) and returns the
// match.
func (r *chatRun) waitFor(re string) string {
	r.t.Helper()
	rx := regexp.MustCompile(re)
	timeout := time.After(wait)
	for {
		r.out.mu.Lock()
		text, ch := r.out.b.String(), r.out.change
		r.out.mu.Unlock()
		if m := rx.FindString(text); m != "" {
			return m
		}
		select {
		case <-ch:
		case err := <-r.done:
			r.done <- err
			if m := rx.FindString(r.out.String()); m != "" {
				return m
			}
			r.t.Fatalf("Chat returned (%v) before printing %q; output:\n%s", err, re, r.out.String())
		case <-timeout:
			r.t.Fatalf("no %q in the output within %v:\n%s", re, wait, r.out.String())
		}
	}
}

// wait waits for Chat to return and gives its error.
func (r *chatRun) wait() error {
	r.t.Helper()
	if r.over {
		return r.err
	}
	select {
	case r.err = <-r.done:
		r.over = true
		return r.err
	case <-time.After(wait):
		r.t.Fatalf("Chat did not return; output:\n%s", r.out.String())
		return nil
	}
}

// lines is the output with session ids replaced by <sid>, <sid2>, and
// times by <t>.
func (r *chatRun) lines() []string {
	text := r.out.String()
	var sids []string
	for _, m := range regexp.MustCompile(`session ([A-Z0-9]{20,})`).FindAllStringSubmatch(text, -1) {
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
	text = regexp.MustCompile(`after [0-9.]+m?s`).ReplaceAllString(text, "after <t>")
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
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
	r := startChat(t, ChatConfig{Client: cfg})
	r.waitFor(`session \w+ started`)
	r.typeLine("hello")
	r.waitFor(`\[2\] agent: Agent reply: hello`)
	r.typeLine("/context goal=test lang=zh")
	r.waitFor(`context: `)
	r.typeLine("/history 2")
	r.waitFor(`  \[2\] agent`)
	r.typeLine("")
	r.typeLine("/drop")
	r.waitFor(`reconnected to`)
	r.typeLine("again")
	r.waitFor(`\[4\] agent: Agent reply: again`)
	r.typeLine("/bogus")
	r.waitFor(`unknown command`)
	r.typeLine("/complete")
	if err := r.wait(); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	url := n.url()
	wantLines(t, r.lines(), []string{
		"connected to " + url + ": session <sid> started — type a message, /help for commands",
		"[1] user: hello",
		"[2] agent: Agent reply: hello",
		`context: {"goal":"test","lang":"zh"}`,
		"history: 2 entries",
		"  [1] user: hello",
		"  [2] agent: Agent reply: hello",
		"dropping the connection",
		"connection lost (dropped on purpose); reconnecting…",
		"reconnected to " + url + " after <t>: session <sid> resumed, nothing missed",
		"[3] user: again",
		"[4] agent: Agent reply: again",
		"unknown command /bogus; " + ChatHelp,
		"session <sid> completed",
	})
	sid := regexp.MustCompile(`session (\w+) completed`).FindStringSubmatch(r.out.String())[1]

	// The completed session cannot be resumed: Chat says so and goes on in
	// the new one; /quit leaves it resumable and says how to come back.
	cfg.SessionID, cfg.LastSeq = sid, 4
	r = startChat(t, ChatConfig{Client: cfg, ResumeCommand: func(id string) string { return "tether chat --session " + id }})
	r.waitFor(`continuing in new session`)
	r.waitFor(`session \w+ resumed`)
	r.typeLine("hi")
	r.waitFor(`\[2\] agent: Agent reply: hi`)
	r.typeLine("/quit")
	if err := r.wait(); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	wantLines(t, r.lines(), []string{
		"session <sid> could not be resumed (completed); continuing in new session <sid2>",
		"connected to " + url + ": session <sid2> resumed, 0 entries — type a message, /help for commands",
		"[1] user: hi",
		"[2] agent: Agent reply: hi",
		"left session <sid2>; it stays resumable for 5m0s",
		"to resume: tether chat --session <sid2>",
	})
}

// TestChatReadsDuringTurn: /drop typed while a tool runs is acted on at
// once, and the turn's entries come after the resume.
func TestChatReadsDuringTurn(t *testing.T) {
	n := newNode(t, nodeOpts{engine: engine.NewDemo(engine.DemoConfig{SearchDelay: 2 * time.Second})})
	r := startChat(t, ChatConfig{Client: Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)}})
	r.waitFor(`started`)
	r.typeLine("laptops")
	r.waitFor(`\[2\] tool: search started`)
	r.typeLine("/drop")
	r.waitFor(`reconnected to`)
	r.waitFor(`\[4\] agent`)
	r.typeLine("/quit")
	if err := r.wait(); err != nil {
		t.Fatal(err)
	}
	got := r.lines()
	wantLines(t, got[1:], []string{
		"[1] user: laptops",
		"[2] tool: search started",
		"dropping the connection",
		"connection lost (dropped on purpose); reconnecting…",
		"reconnected to " + n.url() + " after <t>: session <sid> resumed, nothing missed",
		`[3] tool: search completed: Found 3 results for "laptops".`,
		`[4] agent: I searched for "laptops". Found 3 results for "laptops".`,
		"left session <sid>; it stays resumable for 5m0s",
	})
}

// TestChatEndOfInput: piped input is sent in order, once connected, and
// answered before Chat returns.
func TestChatEndOfInput(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var out bytes.Buffer
	err := Chat(ctxT(t), ChatConfig{Client: Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0), Logger: quiet},
		In: strings.NewReader("one\ntwo\nthree\n"), Out: &out})
	if err != nil {
		t.Fatalf("Chat: %v\n%s", err, out.String())
	}
	text := out.String()
	at := func(s string) int {
		i := strings.Index(text, s)
		if i < 0 {
			t.Fatalf("%q missing from:\n%s", s, text)
		}
		return i
	}
	if !(at("connected to") < at("] user: one") && at("] user: one") < at("] user: two") && at("] user: two") < at("] user: three")) {
		t.Fatalf("sends out of order:\n%s", text)
	}
	if at("agent: Agent reply: three") > at("left session") || strings.Count(text, "not connected") > 1 {
		t.Fatalf("output:\n%s", text)
	}
}

// TestChatRefusedGoesOn: refused messages are reported; the chat stays.
func TestChatRefusedGoesOn(t *testing.T) {
	n := newNode(t, nodeOpts{})
	r := startChat(t, ChatConfig{Client: Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)}})
	r.waitFor(`started`)
	r.typeLine(strings.Repeat("x", 40000))
	r.waitFor(`not sent: the server refused it \(too_large: content is 40000 bytes, the limit is 32768\)`)
	r.typeLine(strings.Repeat("y", 70000))
	r.waitFor(`not sent: too large: the send frame is \d+ bytes, over the server's frame limit of 65536 bytes`)
	r.typeLine("still here")
	r.waitFor(`\[2\] agent: Agent reply: still here`)
	if strings.Contains(r.out.String(), "Config.") {
		t.Fatalf("output names Go identifiers:\n%s", r.out.String())
	}
}

// TestChatBadToken: the chat ends with the server's reason.
func TestChatBadToken(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var out bytes.Buffer
	err := Chat(ctxT(t), ChatConfig{Client: Config{URLs: []string{n.url()}, Token: "not-a-jwt", Logger: quiet},
		In: strings.NewReader(""), Out: &out})
	if !errors.Is(err, ErrUnauthorized) || !strings.HasPrefix(err.Error(), "the server refused the token: ") {
		t.Fatalf("Chat = %v; output:\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "connected") {
		t.Fatalf("Chat said it connected:\n%s", out.String())
	}
}
