package main

// A Go agent endpoint (gateway/AGENT-PROTOCOL.md) for the --agent http
// tests: a real HTTP server on 127.0.0.1 that checks every signature,
// counts requests by Idempotency-Key and by call id, and answers by the
// user's message's first word, so each test picks a behaviour by what it
// sends.

import (
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine/httpagent"
)

const agentTestSecret = "agent-test-secret"

type testAgent struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	keys     map[string]int // Idempotency-Key → requests
	tools    map[string]int // call_id → tool requests
	badSigs  int
	flaky    map[string]int // Idempotency-Key → 500s still to answer
	released bool

	release     chan struct{} // lets the "resume" reply go on
	toolBlocked chan string   // a call id whose tool request is in
	held        chan struct{} // a "hold" step request was closed by Tether
}

// newTestAgent serves on addr ("" for any free port).
func newTestAgent(t *testing.T, addr string) *testAgent {
	t.Helper()
	a := &testAgent{
		t: t, keys: map[string]int{}, tools: map[string]int{}, flaky: map[string]int{},
		release: make(chan struct{}), toolBlocked: make(chan string, 8), held: make(chan struct{}, 8),
	}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	if addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen %s: %v", addr, err)
		}
		a.srv.Listener = l
	}
	a.srv.Start()
	t.Cleanup(a.close)
	return a
}

func (a *testAgent) close() {
	a.releaseReply()
	a.srv.CloseClientConnections()
	a.srv.Close()
}

func (a *testAgent) url() string { return a.srv.URL + "/agent" }

func (a *testAgent) releaseReply() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.released {
		a.released = true
		close(a.release)
	}
}

func (a *testAgent) count(m map[string]int, k string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return m[k]
}

// checkSig verifies Tether-Signature as an endpoint must.
func checkSig(header string, body []byte, now time.Time) error {
	var ts, sig string
	for _, kv := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	var sec int64
	if _, err := fmt.Sscan(ts, &sec); err != nil || sig == "" {
		return fmt.Errorf("malformed signature %q", header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("stale timestamp %s", ts)
	}
	want := httpagent.Sign([]byte(agentTestSecret), body, time.Unix(sec, 0))
	if !hmac.Equal([]byte(want), []byte(header)) {
		return fmt.Errorf("bad signature")
	}
	return nil
}

type agentReq struct {
	Kind   string `json:"kind"`
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	User   struct {
		Content string `json:"content"`
	} `json:"user"`
	Step  int `json:"step"`
	Steps []struct {
		Content  string         `json:"content"`
		Metadata map[string]any `json:"metadata"`
	} `json:"steps"`
}

func (a *testAgent) serve(w http.ResponseWriter, r *http.Request) {
	var body []byte
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		body = append(body, buf[:n]...)
		if err != nil {
			break
		}
	}
	if err := checkSig(r.Header.Get("Tether-Signature"), body, time.Now()); err != nil {
		a.mu.Lock()
		a.badSigs++
		a.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var req agentReq
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	a.keys[key]++
	if req.Kind == "tool" {
		a.tools[req.CallID]++
	}
	a.mu.Unlock()

	w.Header().Set("Content-Type", "application/x-ndjson")
	fl := w.(http.Flusher)
	send := func(v map[string]any) {
		b, _ := json.Marshal(v)
		_, _ = w.Write(append(b, '\n'))
		fl.Flush()
	}
	text := func(s string) { send(map[string]any{"type": "text", "text": s}) }
	if req.Kind == "tool" {
		a.tool(r, req, key, send)
		return
	}
	word, _, _ := strings.Cut(req.User.Content, " ")
	last := ""
	if n := len(req.Steps); n > 0 {
		last = req.Steps[n-1].Content
	}
	if req.Step > 0 {
		send(map[string]any{"type": "reply", "text": fmt.Sprintf("%s: %s", word, last)})
		return
	}
	switch word {
	case "stream":
		for _, p := range []string{"one ", "two ", "three"} {
			text(p)
		}
		send(map[string]any{"type": "reply"})
	case "resume":
		text("part0 ")
		text("part1 ")
		select {
		case <-a.release:
		case <-r.Context().Done():
			return
		}
		text("part2 ")
		text("part3")
		send(map[string]any{"type": "reply", "agent_context": map[string]any{"resumed": true}})
	case "charge", "lookup", "approve":
		send(map[string]any{"type": "tool_call", "name": word, "args": map[string]any{"what": req.User.Content},
			"idempotent": word == "lookup", "approval": word == "approve"})
	case "flaky":
		a.mu.Lock()
		left, seen := a.flaky[key]
		if !seen {
			left = 2
		}
		if left > 0 {
			a.flaky[key] = left - 1
		}
		a.mu.Unlock()
		if left > 0 {
			if left == 2 {
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		}
		text("recovered")
		send(map[string]any{"type": "reply"})
	case "broken":
		text("ok ")
		_, _ = w.Write([]byte("{not json\n"))
	case "cut":
		text("half ")
		_, _ = w.Write([]byte(`{"type":"te`))
		fl.Flush()
		panic(http.ErrAbortHandler) // the connection closes mid-line
	case "slow":
		<-r.Context().Done()
	case "hold":
		text("thinking ")
		<-r.Context().Done()
		a.held <- struct{}{}
	case "oops":
		send(map[string]any{"type": "error", "message": "the agent gave up"})
	default:
		send(map[string]any{"type": "reply", "text": "echo: " + req.User.Content})
	}
}

// tool: charge blocks until its connection goes (the node dies); lookup
// does the same on its first request and answers the second.
func (a *testAgent) tool(r *http.Request, req agentReq, key string, send func(map[string]any)) {
	if req.Name == "charge" || a.count(a.keys, key) == 1 {
		a.toolBlocked <- req.CallID
		<-r.Context().Done()
		return
	}
	send(map[string]any{"type": "progress", "text": "looking"})
	send(map[string]any{"type": "result", "text": "found 42"})
}
