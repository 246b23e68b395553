package main

// The operator's side of the binary (issue 9) and the --dev-tokens rules
// (issue 6 item 6), on real processes.

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func TestVersion(t *testing.T) {
	t.Parallel()
	want := regexp.MustCompile(`^tether \S+.* go\d+\.\d+`)
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		out, stderr, code := runTether(t, args...)
		if code != 0 || !want.MatchString(strings.TrimSpace(out)) || len(lines(out)) != 1 || stderr != "" {
			t.Errorf("tether %v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
}

// TestHelpEverywhere: --help (and -h) on every command prints the flags
// on stdout and exits 0.
func TestHelpEverywhere(t *testing.T) {
	t.Parallel()
	cases := map[string]string{ // command → a flag its help must name
		"":      "serve",
		"serve": "-listen",
		"token": "-user",
		"chat":  "-url",
		"bench": "-local",
	}
	for cmd, mention := range cases {
		for _, h := range []string{"--help", "-h"} {
			args := []string{h}
			if cmd != "" {
				args = []string{cmd, h}
			}
			out, stderr, code := runTether(t, args...)
			if code != 0 || !strings.Contains(out, mention) || stderr != "" {
				t.Errorf("tether %v: exit %d, stderr %q, stdout names %q: %v", args, code, stderr, mention, strings.Contains(out, mention))
			}
		}
	}
	if out, _, code := runTether(t, "help"); code != 0 || !strings.Contains(out, "usage: tether") {
		t.Errorf("tether help: exit %d, %q", code, out)
	}
}

// TestBadFlagOneLine: a bad flag or value is one line naming it plus a
// hint, not the whole usage, and a non-zero exit.
func TestBadFlagOneLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--nope"}, "-nope"},
		{[]string{"serve", "--window", "abc"}, "abc"},
		{[]string{"serve", "--rate", "fast"}, "fast"},
		{[]string{"serve", "stray"}, "stray"},
		{[]string{"token", "--nope"}, "-nope"},
		{[]string{"chat", "--nope"}, "-nope"},
		{[]string{"bench", "--nope"}, "-nope"},
	}
	for _, c := range cases {
		_, stderr, code := runTether(t, c.args...)
		l := lines(stderr)
		if code == 0 || len(l) != 1 || !strings.Contains(l[0], c.says) || !strings.Contains(l[0], "--help") {
			t.Errorf("tether %v: exit %d, stderr (%d lines):\n%s", c.args, code, len(l), stderr)
		}
	}
}

// TestEnvValidated: an environment variable is checked like its flag: a
// bad value is an error naming the variable (not the default silently),
// and a good one is used.
func TestEnvValidated(t *testing.T) {
	t.Parallel()
	for _, env := range []string{"TETHER_WINDOW=abc", "TETHER_RATE=fast", "TETHER_MAX_CONTEXT=1k", "TETHER_DEV_TOKENS=maybe", "TETHER_HELLO_TIMEOUT=-"} {
		_, stderr, code := runTetherEnv(t, []string{env}, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--jwt-secret", "S")
		name, _, _ := strings.Cut(env, "=")
		if l := lines(stderr); code == 0 || len(l) != 1 || !strings.Contains(l[0], name) {
			t.Errorf("%s: exit %d, stderr:\n%s", env, code, stderr)
		}
	}
	// A value that parses but is out of range is refused too.
	_, stderr, code := runTetherEnv(t, []string{"TETHER_WINDOW=-5m"}, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--jwt-secret", "S")
	if code == 0 || len(lines(stderr)) != 1 {
		t.Errorf("TETHER_WINDOW=-5m: exit %d, stderr:\n%s", code, stderr)
	}
	// A good value is used: the session frame carries the window.
	p := startProcEnv(t, t.TempDir(), []string{"TETHER_WINDOW=7s", "TETHER_JWT_SECRET=" + testSecret})
	c := dial(t, p.wsURL())
	if s := c.hello(token(t, "alice"), "", 0); s.WindowS != 7 {
		t.Fatalf("TETHER_WINDOW=7s: window_s %v", s.WindowS)
	}
	// And a flag beats the environment.
	q := startProcEnv(t, t.TempDir(), []string{"TETHER_WINDOW=7s"}, "--jwt-secret", testSecret, "--window", "9s")
	c = dial(t, q.wsURL())
	if s := c.hello(token(t, "alice"), "", 0); s.WindowS != 9 {
		t.Fatalf("--window 9s over TETHER_WINDOW=7s: window_s %v", s.WindowS)
	}
}

// TestSecondServeSameDataDir: a second serve on a data directory another
// process holds says so and exits non-zero, leaving the first one be.
func TestSecondServeSameDataDir(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p := startServe(t, data)
	_, stderr, code := runTether(t, "serve", "--listen", "127.0.0.1:0", "--data", data, "--jwt-secret", testSecret)
	if code == 0 || !strings.Contains(stderr, "in use by another process") {
		t.Fatalf("second serve on %s: exit %d, stderr:\n%s", data, code, stderr)
	}
	c := dial(t, p.wsURL())
	if s := c.hello(token(t, "alice"), "", 0); s.Reason != "new" {
		t.Fatalf("the first node after the second was refused: %s", s.Raw)
	}
}

// TestJSONLogsAndDebugEvents: --log-format json writes one JSON object per
// line; at --log-level debug each connection event (hello, resume, bad
// frame, tool run, close with its code) has a line with the session id;
// /metrics counts the connections.
func TestJSONLogsAndDebugEvents(t *testing.T) {
	t.Parallel()
	if _, stderr, code := runTether(t, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--jwt-secret", "S", "--log-format", "xml"); code == 0 || !strings.Contains(stderr, "--log-format") {
		t.Errorf("--log-format xml: exit %d, %q", code, stderr)
	}
	p := startServe(t, t.TempDir(), "--log-format", "json", "--log-level", "debug", "--agent", "demo", "--demo-search-delay", "60ms")
	tok := token(t, "alice")
	c := dial(t, p.wsURL())
	sid := c.hello(tok, "", 0).SessionID
	c.mustWrite(sendFrame("q", "find a laptop"))
	c.until(15*time.Second, "the agent's answer", nil, func(f frame) bool { return f.Type == "message" && f.Role == "agent" })
	c.mustWrite(map[string]any{"type": "dance"})
	c.expect("error", 10*time.Second)
	c.closeNormal()
	r := dial(t, p.wsURL())
	if s := r.hello(tok, sid, 0); !s.Resumed {
		t.Fatalf("resume: %s", s.Raw)
	}
	r.closeNormal()

	want := []struct {
		msg   string
		attrs map[string]any
	}{
		{"hello", map[string]any{"session": sid, "reason": "new"}},
		{"tool run", map[string]any{"session": sid, "tool": "search"}},
		{"bad frame", map[string]any{"session": sid}},
		{"connection closed", map[string]any{"session": sid, "code": float64(1000)}},
		{"hello", map[string]any{"session": sid, "reason": "resumed"}},
	}
	var recs []map[string]any
	defer func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", p.Stderr())
		}
	}()
	poll(t, 15*time.Second, "every connection event to be logged", func() bool {
		recs = nil
		for _, l := range lines(p.Stderr()) {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("--log-format json wrote a line that is not JSON: %q", l)
			}
			for _, k := range []string{"time", "level", "msg"} {
				if _, ok := m[k]; !ok {
					t.Fatalf("log record without %q: %q", k, l)
				}
			}
			recs = append(recs, m)
		}
		for _, w := range want {
			if !hasRecord(recs, w.msg, w.attrs) {
				return false
			}
		}
		// Both connections closed normally.
		return countRecords(recs, "connection closed", map[string]any{"session": sid, "code": float64(1000)}) == 2
	})
	if v := p.mustMetric("tether_connections_opened_total"); v != 2 {
		t.Errorf("tether_connections_opened_total = %v, want 2", v)
	}
	if v := p.mustMetric(`tether_connections_closed_total{code="1000"}`); v != 2 {
		t.Errorf(`tether_connections_closed_total{code="1000"} = %v, want 2`, v)
	}
}

func countRecords(recs []map[string]any, msg string, attrs map[string]any) int {
	n := 0
	for _, r := range recs {
		if r["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range attrs {
			if r[k] != v {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

func hasRecord(recs []map[string]any, msg string, attrs map[string]any) bool {
	return countRecords(recs, msg, attrs) > 0
}

// TestDevTokensNeedLoopback: --dev-tokens lets anyone who reaches the node
// log in as anyone, so serve refuses it on a non-loopback --listen (even
// with a real --jwt-secret) unless --dev-tokens-anywhere says the
// operator means it.
func TestDevTokensNeedLoopback(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:0", ":0", "192.0.2.10:0", "[::]:0", "example.com:0"} {
		for _, secret := range [][]string{nil, {"--jwt-secret", "real-secret"}} {
			args := append([]string{"serve", "--listen", listen, "--data", t.TempDir(), "--dev-tokens"}, secret...)
			_, stderr, code := runTether(t, args...)
			if code == 0 || !strings.Contains(stderr, "--dev-tokens-anywhere") || len(lines(stderr)) != 1 {
				t.Errorf("tether %v: exit %d, stderr:\n%s", args, code, stderr)
			}
		}
	}
	// Through the environment alike.
	_, stderr, code := runTetherEnv(t, []string{"TETHER_DEV_TOKENS=true", "TETHER_LISTEN=0.0.0.0:0"}, "serve", "--data", t.TempDir())
	if code == 0 || !strings.Contains(stderr, "--dev-tokens-anywhere") {
		t.Errorf("TETHER_DEV_TOKENS with TETHER_LISTEN=0.0.0.0:0: exit %d, stderr:\n%s", code, stderr)
	}
	// Loopback addresses are fine (localhost, 127.0.0.0/8, ::1): the
	// node starts. (The non-loopback case with --dev-tokens-anywhere is
	// checked without binding: TestDevTokensAnywhereParses.)
	for _, listen := range []string{"localhost:0", "127.0.0.1:0"} {
		p := startProc(t, t.TempDir(), "--listen", listen, "--dev-tokens")
		if code, _ := p.term(10 * time.Second); code != 0 {
			t.Errorf("--dev-tokens on %s: exit %d after SIGTERM", listen, code)
		}
	}
}

// TestDevTokensAnywhereParses: with --dev-tokens-anywhere a non-loopback
// --listen is accepted (in process: a test binds nothing but loopback).
// Not parallel: it clears the TETHER_ variables of the test's own
// environment.
func TestDevTokensAnywhereParses(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TETHER_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
	m := &Main{Stdout: io.Discard, Stderr: io.Discard}
	c, err := m.parseServe([]string{"--listen", "0.0.0.0:8080", "--dev-tokens", "--dev-tokens-anywhere", "--jwt-secret", "S"})
	if err != nil || !c.devTokens {
		t.Fatalf("--dev-tokens-anywhere on 0.0.0.0:8080: %+v, %v", c.devTokens, err)
	}
	if _, err := m.parseServe([]string{"--listen", "0.0.0.0:8080", "--dev-tokens"}); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--dev-tokens on 0.0.0.0:8080 without --dev-tokens-anywhere: %v", err)
	}
}

// TestDevTokensLogged: every token minted by POST /dev/token is logged
// with its user, never with the token.
func TestDevTokensLogged(t *testing.T) {
	t.Parallel()
	p := startProc(t, t.TempDir(), "--dev-tokens")
	if _, err := p.waitLog("dev tokens are on", 5*time.Second); err != nil {
		t.Errorf("no warning that dev tokens are on: %v", err)
	}
	var toks []string
	for _, user := range []string{"alice", "bob", "alice"} {
		resp, err := http.Post(p.httpURL()+"/dev/token", "application/json", strings.NewReader(`{"user":"`+user+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Token string `json:"token"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || body.Token == "" {
			t.Fatalf("POST /dev/token for %s: %d %v", user, resp.StatusCode, err)
		}
		toks = append(toks, body.Token)
	}
	poll(t, 10*time.Second, "three dev token lines", func() bool {
		return strings.Count(p.Stderr(), "msg=\"dev token issued\"") == 3
	})
	logs := p.Stderr()
	for _, user := range []string{"user=alice", "user=bob"} {
		if !strings.Contains(logs, user) {
			t.Errorf("no dev token line with %s:\n%s", user, logs)
		}
	}
	for _, tok := range toks {
		for _, part := range strings.Split(tok, ".") {
			if strings.Contains(logs, part) {
				t.Fatalf("the log holds (part of) a minted token %q:\n%s", part, logs)
			}
		}
	}
}

// TestServeOrigins: the binary's --allowed-origins reaches the node: a
// page of a listed origin may open the WebSocket, any other gets 403;
// without the flag only the node's own host may.
func TestServeOrigins(t *testing.T) {
	t.Parallel()
	upgrade := func(p *proc, origin string) int {
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
		ws, resp, err := d.Dial(p.wsURL(), http.Header{"Origin": {origin}})
		if err == nil {
			ws.Close()
			return 101
		}
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return resp.StatusCode
	}
	def := startServe(t, t.TempDir())
	if got := upgrade(def, "http://evil.example"); got != 403 {
		t.Errorf("default, foreign origin: %d, want 403", got)
	}
	if got := upgrade(def, def.httpURL()); got != 101 {
		t.Errorf("default, the node's own origin: %d, want 101", got)
	}
	p := startServe(t, t.TempDir(), "--allowed-origins", "https://app.example.io,https://admin.example.io")
	for origin, want := range map[string]int{"https://app.example.io": 101, "https://admin.example.io": 101, "http://evil.example": 403} {
		if got := upgrade(p, origin); got != want {
			t.Errorf("--allowed-origins, Origin %s: %d, want %d", origin, got, want)
		}
	}
	any := startServe(t, t.TempDir(), "--allowed-origins", "*")
	if got := upgrade(any, "http://evil.example"); got != 101 {
		t.Errorf("--allowed-origins *: %d, want 101", got)
	}
}

// TestServeHeaderTimeout: the binary's HTTP server cuts off a client that
// never finishes its request headers (the default header timeout, 10s).
func TestServeHeaderTimeout(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir())
	nc, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	if _, err := io.WriteString(nc, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(start.Add(30 * time.Second))
	b, err := io.ReadAll(nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a half-sent header held the connection for 30s")
	}
	if len(b) > 0 && !bytes.Contains(b, []byte(" 408 ")) {
		t.Fatalf("answer to a half-sent header: %q", b)
	}
	t.Logf("cut off after %v", time.Since(start).Round(100*time.Millisecond))
}

// TestProtocolDocFlags: every flag of `tether serve` is in the protocol
// reference's command line (gateway/PROTOCOL.md).
func TestProtocolDocFlags(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../gateway/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	out, _, code := runTether(t, "serve", "--help")
	if code != 0 {
		t.Fatalf("serve --help: exit %d", code)
	}
	flags := regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(out, -1)
	if len(flags) < 20 {
		t.Fatalf("found %d flags in serve --help:\n%s", len(flags), out)
	}
	for _, f := range flags {
		if !bytes.Contains(doc, []byte("--"+f[1])) {
			t.Errorf("gateway/PROTOCOL.md does not document --%s", f[1])
		}
	}
}
