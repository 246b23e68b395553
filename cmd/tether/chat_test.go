package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/faultnet"
)

// TestChatServerDown: with no server, chat says so and counts down to
// the next attempt; it says it is connected only once a server answers.
func TestChatServerDown(t *testing.T) {
	t.Parallel()
	// A port the server binds later: one no outgoing connection gets.
	addr, err := cluster.FreeLocalAddr(false)
	if err != nil {
		t.Fatal(err)
	}
	ws := "ws://" + addr + "/v1/ws"
	c := startChatProc(t, "--url", ws, "--user", "alice")
	c.waitFor(`server unreachable at ` + regexp.QuoteMeta(addr) + ` \(connection refused\), retrying in [0-9.]+s…`)
	if strings.Contains(c.stdout(), "connected") {
		t.Fatalf("chat said connected with no server:\n%s", c.stdout())
	}
	startProc(t, t.TempDir(), "--dev-tokens", "--listen", addr)
	sid := c.waitFor(`connected to ` + regexp.QuoteMeta(ws) + `: session (\w+) started`)[1]
	c.typeLine("hello")
	c.waitFor(`\[2\] agent: Agent reply: hello`)
	c.typeLine("/quit")
	c.waitFor(`to resume: tether chat --url ` + regexp.QuoteMeta(ws) + ` --session ` + sid + ` --user alice\n`)
	if code := c.exit(); code != 0 {
		t.Fatalf("exit %d after /quit\nstderr:\n%s", code, c.stderr())
	}
}

// TestChatBadToken: a refused token ends chat at once with the reason,
// on one line, with a non-zero exit.
func TestChatBadToken(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir())
	bad, err := gateway.Issue([]byte("another secret"), gateway.TokenSpec{User: "alice"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", bad}, "tether: chat: the server refused the token: "},
		{[]string{"--user", "alice"}, "tether: chat: getting a token: the server does not hand out dev tokens (start it with --dev-tokens, or pass --token)\n"},
	} {
		c := startChatProc(t, append([]string{"--url", p.wsURL()}, tc.args...)...)
		code := c.exit()
		if code == 0 || !strings.HasPrefix(c.stderr(), tc.want) || strings.Count(c.stderr(), "\n") != 1 {
			t.Errorf("chat %v: exit %d, stderr %q; want one line starting %q", tc.args[0], code, c.stderr(), tc.want)
		}
		if strings.Contains(c.stdout(), "connected") {
			t.Errorf("chat %v said connected:\n%s", tc.args[0], c.stdout())
		}
	}
}

// TestChatRefusedStaysUp: messages the server refuses are reported and
// the chat goes on.
func TestChatRefusedStaysUp(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir())
	c := startChatProc(t, "--url", p.wsURL(), "--token", token(t, "alice"))
	c.waitFor(`started`)
	c.typeLine(strings.Repeat("x", 40000))
	c.waitFor(`not sent: the server refused it \(too_large: content is 40000 bytes, the limit is 32768\)`)
	c.typeLine(strings.Repeat("y", 70000))
	c.waitFor(`not sent: too large: the send frame is \d+ bytes, over the server's frame limit of 65536 bytes\n`)
	c.typeLine("still here")
	c.waitFor(`\[2\] agent: Agent reply: still here`)
	if !c.running() || strings.Contains(c.stdout(), "Config.") {
		t.Fatalf("running %v; stdout:\n%s", c.running(), c.stdout())
	}
	c.typeLine("/quit")
	if code := c.exit(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestChatDropMidTool: /drop typed while the demo engine's search runs is
// acted on at once; the turn's entries come after the resume.
func TestChatDropMidTool(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--agent", "demo", "--demo-search-delay", "2s")
	c := startChatProc(t, "--url", p.wsURL(), "--token", token(t, "alice"))
	c.waitFor(`started`)
	c.typeLine("laptops")
	c.waitFor(`\[2\] tool: search started`)
	c.typeLine("/drop")
	c.waitFor(`\[4\] agent: I searched for "laptops"`)
	out := c.stdout()
	i, j, k := strings.Index(out, "dropping the connection"), strings.Index(out, "reconnected to"), strings.Index(out, "[3] tool: search completed")
	if i < 0 || j < i || k < j {
		t.Fatalf("want the drop and the resume before the search completed:\n%s", out)
	}
	c.typeLine("/quit")
	c.exit()
}

// TestChatQuitResumeInterrupt: /quit prints the exact command to resume;
// running it prints the whole session from its start (paging history past
// the replay limit, no --last-seq needed); Ctrl-C prints the command again.
func TestChatQuitResumeInterrupt(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--dev-tokens", "--replay-limit", "3")
	c := startChatProc(t, "--url", p.wsURL(), "--user", "alice")
	c.waitFor(`started`)
	for i := 1; i <= 5; i++ {
		c.typeLine(fmt.Sprint("m", i))
		c.waitFor(fmt.Sprintf(`agent: Agent reply: m%d\n`, i))
	}
	c.typeLine("/quit")
	m := c.waitFor(`left session (\w+); it stays resumable for 5m0s\nto resume: (tether chat [^\n]+)\n`)
	sid, command := m[1], m[2]
	if want := "tether chat --url " + p.wsURL() + " --session " + sid + " --user alice"; command != want {
		t.Fatalf("resume command %q, want %q", command, want)
	}
	if code := c.exit(); code != 0 {
		t.Fatalf("exit %d", code)
	}

	args := strings.Fields(strings.TrimPrefix(command, "tether chat "))
	r := startChatProc(t, args...)
	r.waitFor(`connected to \S+: session ` + sid + ` resumed, 10 entries`)
	r.waitFor(`\[10\] agent: Agent reply: m5\n`)
	var want strings.Builder
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&want, "[%d] user: m%d\n[%d] agent: Agent reply: m%d\n", 2*i-1, i, 2*i, i)
	}
	if !strings.Contains(r.stdout(), want.String()) {
		t.Fatalf("transcript:\n%s\nwant it to hold:\n%s", r.stdout(), want.String())
	}
	r.interrupt()
	r.waitFor(`left session ` + sid + `; it stays resumable for 5m0s\nto resume: ` + regexp.QuoteMeta(command) + `\n`)
	if code := r.exit(); code != 0 {
		t.Fatalf("exit %d after Ctrl-C\nstderr:\n%s", code, r.stderr())
	}
}

// TestChatTokenReuse: reconnects reuse the dev token; /dev/token is asked
// once however often the connection drops.
func TestChatTokenReuse(t *testing.T) {
	t.Parallel()
	p := startProc(t, t.TempDir(), "--dev-tokens")
	target, _ := url.Parse(p.httpURL())
	var tokens atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/dev/token" {
			tokens.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	defer front.Close()
	c := startChatProc(t, "--url", "ws"+strings.TrimPrefix(front.URL, "http")+"/v1/ws", "--user", "alice")
	c.waitFor(`started`)
	for i := 1; i <= 3; i++ {
		c.typeLine("/drop")
		c.waitFor(fmt.Sprintf(`(?s)(reconnected to .*){%d}`, i))
	}
	c.typeLine("after")
	c.waitFor(`Agent reply: after`)
	if n := tokens.Load(); n != 1 {
		t.Fatalf("/dev/token asked %d times, want 1", n)
	}
	c.typeLine("/quit")
	c.exit()
}

// TestDevTokenFreshConnection: a token fetch after the network changed
// does not wait on the connection of the previous fetch, which died
// with it.
func TestDevTokenFreshConnection(t *testing.T) {
	t.Parallel()
	p := startProc(t, t.TempDir(), "--dev-tokens")
	np := newNetProxy(t, p.addr)
	d, err := newDevTokens([]string{np.URL()}, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := d.token(ctx); err != nil {
		t.Fatal(err)
	}
	np.Blackhole(faultnet.Up) // the first connection is dead; new ones get through
	start := time.Now()
	if _, err := d.token(ctx); err != nil {
		t.Fatal(err)
	}
	// A pooled connection would have waited out a timeout (5s or more).
	if took := time.Since(start); took > 3*time.Second || np.Count() != 2 {
		t.Fatalf("second fetch took %v over %d connections", took, np.Count())
	}
}

// chatBlackhole: the network dies silently under an idle chat; a message
// typed during the outage is answered once the network is back. It
// returns how long the loss took to show.
func chatBlackhole(t *testing.T, quiet time.Duration, flags ...string) time.Duration {
	p := startProc(t, t.TempDir(), "--dev-tokens")
	np := newNetProxy(t, p.addr)
	c := startChatProc(t, append([]string{"--url", np.URL(), "--user", "alice"}, flags...)...)
	sid := c.waitFor(`session (\w+) started`)[1]
	c.typeLine("before")
	c.waitFor(`\[2\] agent: Agent reply: before`)
	quietFor(t, np, quiet)
	np.Blackhole(faultnet.Refuse)
	start := time.Now()
	c.typeLine("during the outage")
	c.waitFor(`connection lost \(the connection went silent[^)]*\); reconnecting…`)
	took := time.Since(start)
	c.waitFor(`server unreachable at 127\.0\.0\.1:\d+ \([^)]+\), retrying in`)
	np.SetMode(faultnet.Up)
	c.waitFor(`reconnected to \S+ after [0-9.]+m?s: session ` + sid + ` resumed`)
	c.waitFor(`\[4\] agent: Agent reply: during the outage\n`)
	c.typeLine("/quit")
	c.exit()
	if n := strings.Count(c.stdout(), "user: during the outage"); n != 1 {
		t.Fatalf("the outage message shown %d times:\n%s", n, c.stdout())
	}
	code, snap := p.snapshot(sid, devToken(t, p, "alice"))
	if code != http.StatusOK || snap.LastSeq != 4 || countIn(snap, "user", "during the outage") != 1 ||
		countIn(snap, "agent", "Agent reply: during the outage") != 1 {
		t.Fatalf("server log: HTTP %d, %+v", code, snap)
	}
	return took
}

func TestChatBlackhole(t *testing.T) {
	t.Parallel()
	took := chatBlackhole(t, 0, "--ping-after", "300ms", "--pong-timeout", "300ms")
	t.Logf("loss shown after %v", took)
}

// TestChatBlackholeDefaults: with its default timings, chat shows a
// silent loss within 15s.
func TestChatBlackholeDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 15s")
	}
	t.Parallel()
	took := chatBlackhole(t, time.Second)
	if took >= 15*time.Second {
		t.Fatalf("the loss took %v to show, want < 15s", took)
	}
	t.Logf("loss shown after %v", took)
}

// TestChatSteerShared: two `tether chat` on one session (attached shared)
// both stay live; /approve, /deny and /stop typed into either act on the
// session, and both show what happened.
func TestChatSteerShared(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--agent", "demo", "--demo-search-delay", "60ms", "--demo-stream-delay", "100ms")
	tok := token(t, "alice")
	a := startChatProc(t, "--url", p.wsURL(), "--token", tok)
	sid := a.waitFor(`session (\w+) started`)[1]
	a.typeLine("/approve")
	a.waitFor(`/approve: no tool call is waiting for your approval\n`)
	a.typeLine("book a table")
	a.waitFor(`\[2\] tool: booking awaiting_approval \{"request":"book a table"\}\ntool booking is waiting for your approval: /approve or /deny\n`)
	a.typeLine("/approve")
	a.waitFor(`\[3\] tool: booking approved by alice\n`)
	a.waitFor(`\[6\] agent: Booked: confirmation for "book a table"\n`)

	b := startChatProc(t, "--url", p.wsURL(), "--token", tok, "--session", sid)
	b.waitFor(`session ` + sid + ` resumed, 6 entries`)
	b.waitFor(`\[6\] agent: Booked`)
	b.typeLine("book a room")
	a.waitFor(`\[7\] user: book a room\n\[8\] tool: booking awaiting_approval \{"request":"book a room"\}\ntool booking is waiting for your approval`)
	a.typeLine("/deny")
	for _, c := range []*chatProc{a, b} {
		c.waitFor(`\[9\] tool: booking denied by alice\n`)
		c.waitFor(`\[10\] agent: You declined the booking, so nothing was done for "book a room".\n`)
	}
	b.typeLine("/deny")
	b.waitFor(`/deny: no tool call is waiting for your approval\n`)

	// A long query: its reply streams for seconds, word by word.
	b.typeLine("laptops with a long battery life and a light body for travel and work")
	a.waitFor(`\[14\] agent \(streaming\): I `)
	a.typeLine("/stop")
	a.waitFor(`stopping the running turn\n`)
	for _, c := range []*chatProc{a, b} {
		c.waitFor(`\[14\] agent \(cancelled\): I `)
	}
	code, snap := p.snapshot(sid, tok)
	if code != http.StatusOK || len(snap.Messages) == 0 {
		t.Fatalf("snapshot: HTTP %d, %+v", code, snap)
	}
	last := snap.Messages[len(snap.Messages)-1]
	if last.Seq != 14 || last.Role != "agent" || last.Metadata["cancelled"] != true || strings.Contains(last.Content, "Found 3 results") {
		t.Fatalf("the stopped reply's entry: %+v", last)
	}
	for _, c := range []*chatProc{a, b} {
		c.typeLine("/quit")
		if code := c.exit(); code != 0 {
			t.Fatalf("exit %d\nstderr:\n%s", code, c.stderr())
		}
		if strings.Contains(c.stdout(), "another connection") {
			t.Fatalf("a chat was superseded:\n%s", c.stdout())
		}
	}
}
