package gateway_test

// Issue 9, operators: connection metrics, a debug line per connection
// event, and the browser-origin rules of the WebSocket and the HTTP API.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// TestConnectionMetrics: /metrics counts every upgraded connection and
// every close by the code the server sent (a client's own close is
// answered with its code; 1006 is only for a socket that just ended).
func TestConnectionMetrics(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	metric := func(name string) float64 {
		v, _ := n.metric(t, name)
		return v
	}
	// 1008: a bad token.
	c := dial(t, n.URL)
	c.send(map[string]any{"type": "hello", "token": "nope"})
	c.expectClose(1008)
	// 1007: not JSON after the hello, twice.
	for range 2 {
		c = dial(t, n.URL)
		c.hello(tok, "", 0)
		c.raw(websocket.TextMessage, []byte("{not json"))
		c.expectClose(1007)
	}
	// 1003: a binary frame.
	c = dial(t, n.URL)
	c.raw(websocket.BinaryMessage, []byte(`{"type":"hello"}`))
	c.expectClose(1003)
	// 4001 for the old connection, 1000 after complete for the new one.
	old := dial(t, n.URL)
	sid := checkSession(t, old.hello(tok, "", 0), false, "new", 0, 300)
	nw := dial(t, n.URL)
	nw.resume(tok, sid, 0)
	old.expectClose(4001)
	nw.send(map[string]any{"type": "complete"})
	nw.readType("completed")
	nw.expectClose(1000)
	// 1000 too when the client closes cleanly (the server answers with
	// the client's code), and 1001 for a client going away.
	for _, code := range []int{1000, 1001} {
		c = dial(t, n.URL)
		c.hello(tok, "", 0)
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, "bye"), time.Now().Add(time.Second))
		if got, _ := c.closeCode(); got != code {
			t.Fatalf("the server answered a %d close with %d", code, got)
		}
	}

	want := map[string]float64{"1008": 1, "1007": 2, "1003": 1, "4001": 1, "1000": 2, "1001": 1}
	actortest.Eventually(t, "the closes to be counted", func() bool {
		for code, v := range want {
			if metric(fmt.Sprintf(`tether_connections_closed_total{code="%s"}`, code)) != v {
				return false
			}
		}
		return metric("tether_connections") == 0
	})
	if got := metric("tether_connections_opened_total"); got != 8 {
		t.Fatalf("tether_connections_opened_total = %v, want 8", got)
	}
	if got := metric(`tether_errors_total{code="unauthorized"}`); got != 1 {
		t.Fatalf(`tether_errors_total{code="unauthorized"} = %v, want 1`, got)
	}
}

// logBuffer is a goroutine-safe log destination.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON log records logged so far.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		out = append(out, m)
	}
	return out
}

// find returns the first record with msg whose attributes include want.
func (b *logBuffer) find(t *testing.T, msg string, want map[string]any) map[string]any {
	t.Helper()
	for _, m := range b.lines(t) {
		if m["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range want {
			if fmt.Sprint(m[k]) != fmt.Sprint(v) {
				ok = false
			}
		}
		if ok {
			return m
		}
	}
	return nil
}

// TestDebugLogPerConnectionEvent: at debug level each connection event
// has its line with the session id: hello, resume, bad frame, tool run,
// close with its code.
func TestDebugLogPerConnectionEvent(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	lg := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 30 * time.Millisecond})
	n := startNode(t, nodetest.Options{Actor: actor.Config{Engine: demo, Logger: lg}, Gateway: gateway.Config{Logger: lg, MaxFrame: 4096}})
	tok := nodetest.Token(t, "alice")

	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.sendMsg("q", "find a laptop")
	actortest.Eventually(t, "the agent's answer", func() bool { return c.read()["role"] == "agent" })
	c.send(map[string]any{"type": "send", "id": 7, "content": "x"}) // JSON, but not a valid send
	c.readType("error")
	c.send(map[string]any{"type": "dance"})
	c.readType("error")
	c.raw(websocket.TextMessage, []byte("{not json"))
	c.expectClose(1007)

	r := dial(t, n.URL)
	r.resume(tok, sid, 0)
	r.raw(websocket.TextMessage, []byte(`{"type":"send","id":"big","content":"`+strings.Repeat("z", 5000)+`"}`))
	r.expectClose(1009)

	want := []struct {
		msg   string
		attrs map[string]any
	}{
		{"hello", map[string]any{"session": sid, "reason": "new", "level": "DEBUG"}},
		{"tool run", map[string]any{"session": sid, "tool": "search"}},
		{"bad frame", map[string]any{"session": sid, "err": `malformed send frame: "id" is number, want a string`}},
		{"bad frame", map[string]any{"session": sid, "err": `unknown frame type "dance"`}},
		{"bad frame", map[string]any{"session": sid, "err": "frame is not valid UTF-8 JSON: not JSON"}},
		{"connection closed", map[string]any{"session": sid, "code": 1007}},
		{"hello", map[string]any{"session": sid, "reason": "resumed"}},
		{"bad frame", map[string]any{"session": sid, "err": "frame larger than the limit of 4096 bytes"}},
		{"connection closed", map[string]any{"session": sid, "code": 1009}},
	}
	missing := func() []string {
		var out []string
		for _, w := range want {
			if logs.find(t, w.msg, w.attrs) == nil {
				out = append(out, fmt.Sprintf("%q %v", w.msg, w.attrs))
			}
		}
		return out
	}
	deadline := time.Now().Add(waitFor)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("not logged:\n%s", strings.Join(m, "\n"))
	}
}

// TestOriginCheck: the WebSocket upgrade checks the browser's Origin
// against the node's own host and AllowedOrigins (403 for any other),
// and the HTTP API answers CORS preflights for the same origins.
func TestOriginCheck(t *testing.T) {
	t.Parallel()
	upgrade := func(n *node, origin string) int {
		t.Helper()
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		ws, resp, err := websocket.DefaultDialer.Dial(n.URL, h)
		if err == nil {
			ws.Close()
			resp.Body.Close()
			return http.StatusSwitchingProtocols
		}
		if resp == nil {
			t.Fatalf("dial with Origin %q: %v", origin, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	preflight := func(n *node, path, origin string) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("OPTIONS", n.HTTP+path, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "GET")
		req.Header.Set("Access-Control-Request-Headers", "authorization")
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}

	def := startNode(t, nodetest.Options{})
	self := def.HTTP // the page's own origin: scheme://host:port
	for origin, want := range map[string]int{
		"":                       101, // not a browser
		self:                     101,
		"http://evil.example":    403,
		"null":                   403,
		"http://127.0.0.1:1":     403, // same host name, another port
		"https://app.example.io": 403,
	} {
		if got := upgrade(def, origin); got != want {
			t.Errorf("default node, Origin %q: HTTP %d, want %d", origin, got, want)
		}
	}
	if code, _ := preflight(def, "/v1/sessions/x", "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("preflight from a foreign origin: %d, want 403", code)
	}

	listed := startNode(t, nodetest.Options{Gateway: gateway.Config{AllowedOrigins: []string{"https://app.example.io"}}})
	for origin, want := range map[string]int{
		"https://app.example.io": 101,
		listed.HTTP:              101,
		"http://app.example.io":  403, // another scheme is another origin
		"http://evil.example":    403,
	} {
		if got := upgrade(listed, origin); got != want {
			t.Errorf("--allowed-origins https://app.example.io, Origin %q: HTTP %d, want %d", origin, got, want)
		}
	}
	for _, path := range []string{"/v1/sessions/abc", "/dev/token"} {
		code, h := preflight(listed, path, "https://app.example.io")
		if code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://app.example.io" ||
			!strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "authorization") {
			t.Errorf("preflight of %s from an allowed origin: %d %v", path, code, h)
		}
		if code, h := preflight(listed, path, "http://evil.example"); code != http.StatusForbidden || h.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight of %s from a foreign origin: %d %v", path, code, h)
		}
	}
	// The real request from the allowed origin carries the CORS header.
	tok := nodetest.Token(t, "alice")
	sid := liveSession(t, listed, tok)
	req, _ := http.NewRequest("GET", listed.HTTP+"/v1/sessions/"+sid, nil)
	req.Header.Set("Origin", "https://app.example.io")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.io" {
		t.Errorf("GET from the allowed origin: %d, Access-Control-Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}

	any := startNode(t, nodetest.Options{Gateway: gateway.Config{AllowedOrigins: []string{"*"}}})
	for _, origin := range []string{"http://evil.example", "null", "https://app.example.io"} {
		if got := upgrade(any, origin); got != 101 {
			t.Errorf("--allowed-origins *, Origin %q: HTTP %d, want 101", origin, got)
		}
	}
	if code, h := preflight(any, "/v1/sessions/x", "http://evil.example"); code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") == "" {
		t.Errorf("preflight with *: %d %v", code, h)
	}
}

// TestCloseThenResumeAtOnce: a client that closes cleanly and reconnects
// the moment it has the server's answer ended its first connection with
// 1000, not with the 4001 its own resume would otherwise hand the old
// connection while that one's reader is still on its way out.
func TestCloseThenResumeAtOnce(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	const rounds = 40
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	for range rounds - 1 {
		c.closeClean()
		c = dial(t, n.URL)
		c.resume(tok, sid, 0)
	}
	c.closeClean()
	actortest.Eventually(t, "every close to be counted", func() bool {
		v, _ := n.metric(t, "tether_connections")
		return v == 0
	})
	got, _ := n.metric(t, `tether_connections_closed_total{code="1000"}`)
	replaced, _ := n.metric(t, `tether_connections_closed_total{code="4001"}`)
	if got != rounds || replaced != 0 {
		t.Fatalf("closes counted: 1000 × %v, 4001 × %v; want 1000 × %d", got, replaced, rounds)
	}
}
