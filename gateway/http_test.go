package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

func TestSnapshotEndpoint(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Actor: actor.Config{ReplayLimit: 3}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.chat("a", "one")
	c.chat("b", "two")
	c.send(map[string]any{"type": "context", "set": map[string]any{"goal": "g"}})
	c.readType("context")
	url := n.HTTP + "/v1/sessions/" + sid

	// 401 without a valid token.
	for name, auth := range map[string]string{
		"none":          "",
		"garbage":       "Bearer not-a-jwt",
		"wrong scheme":  "Basic " + tok,
		"wrong secret":  "Bearer " + mustIssue(t, []byte("other"), "alice"),
		"empty bearer":  "Bearer ",
		"expired token": "Bearer " + nodetest.ExpiredToken(t, "alice"),
	} {
		if code, _, _ := do(t, "GET", url, auth, nil); code != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, code)
		}
	}

	// 404, identical, for another user's session and for an unknown id.
	code1, _, other := do(t, "GET", url, "Bearer "+nodetest.Token(t, "mallory"), nil)
	code2, _, unknown := do(t, "GET", n.HTTP+"/v1/sessions/ZZZZZZZZZZZZZZZZZZZZZZZZZZ", "Bearer "+nodetest.Token(t, "mallory"), nil)
	code3, _, long := do(t, "GET", n.HTTP+"/v1/sessions/"+strings.Repeat("A", 65), "Bearer "+nodetest.Token(t, "mallory"), nil)
	if code1 != 404 || code2 != 404 || code3 != 404 {
		t.Fatalf("other user %d, unknown %d, long %d: want 404", code1, code2, code3)
	}
	if string(other) != string(unknown) || string(other) != string(long) {
		t.Fatalf("404 bodies differ: %q / %q / %q", other, unknown, long)
	}

	// 200 with every field for the owner.
	code, hdr, body := do(t, "GET", url, "Bearer "+tok, nil)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("owner: %d %s", code, hdr.Get("Content-Type"))
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "snapshot", m, "session_id", "status", "last_seq", "created_at", "last_active_at", "context", "pending_tool_call", "sensitive", "messages")
	now := float64(time.Now().UnixNano()) / 1e9
	if m["session_id"] != sid || m["status"] != "active" || num(t, m["last_seq"]) != 4 || m["pending_tool_call"] != nil || m["sensitive"] != false {
		t.Fatalf("snapshot %v", m)
	}
	for _, k := range []string{"created_at", "last_active_at"} {
		if v, ok := m[k].(float64); !ok || v > now+1 || v < now-600 {
			t.Errorf("%s = %v, want Unix seconds near now", k, m[k])
		}
	}
	if m["created_at"].(float64) > m["last_active_at"].(float64) {
		t.Errorf("created_at after last_active_at: %v", m)
	}
	if !jsonEq(m["context"], map[string]any{"goal": "g"}) {
		t.Errorf("context %v", m["context"])
	}
	msgs, ok := m["messages"].([]any)
	if !ok || len(msgs) != 3 {
		t.Fatalf("messages: want the newest 3 (replay_limit), got %v", m["messages"])
	}
	for i, e := range msgs {
		em := obj(t, e)
		role := "user"
		if (i+2)%2 == 0 {
			role = "agent"
		}
		checkMessage(t, em, uint64(i+2), role)
	}

	// Status follows the connection.
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")
}

func mustIssue(t *testing.T, secret []byte, user string) string {
	t.Helper()
	tok, err := gateway.Issue(secret, gateway.TokenSpec{User: user}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestHealthReady(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	if code, _, _ := do(t, "GET", n.HTTP+"/healthz", "", nil); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code, _, _ := do(t, "GET", n.HTTP+"/readyz", "", nil); code != 200 {
		t.Fatalf("/readyz %d", code)
	}
	nr := startNode(t, nodetest.Options{Gateway: gateway.Config{Ready: func() error { return errors.New("cluster not joined") }}})
	if code, _, _ := do(t, "GET", nr.HTTP+"/readyz", "", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz when not ready: %d, want 503", code)
	}
	if code, _, _ := do(t, "GET", nr.HTTP+"/healthz", "", nil); code != 200 {
		t.Fatalf("/healthz when not ready: %d", code)
	}
}

func TestDemoPage(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	code, hdr, body := do(t, "GET", n.HTTP+"/", "", nil)
	if code != 200 {
		t.Fatalf("GET /: %d", code)
	}
	// PROTOCOL.md: GET / is the demo chat page.
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") || !strings.Contains(strings.ToLower(string(body)), "<html") {
		t.Errorf("GET / is not the demo chat page: Content-Type %q, body %.80q", ct, body)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.chat("a", "x")
	actortest.Eventually(t, "tether_connections 1", func() bool { v, ok := n.metric(t, "tether_connections"); return ok && v == 1 })
	if v, ok := n.metric(t, "tether_sessions_active"); !ok || v < 1 {
		t.Fatalf("tether_sessions_active %v %v", v, ok)
	}
	if v, ok := n.metric(t, "tether_wal_fsync_batch_requests_count"); !ok || v < 1 {
		t.Fatalf("tether_wal_fsync_batch_requests_count %v %v", v, ok)
	}
	c.send(map[string]any{"type": "nonsense"})
	c.readType("error")
	actortest.Eventually(t, "tether_errors_total{code=\"bad_request\"}", func() bool {
		v, ok := n.metric(t, `tether_errors_total{code="bad_request"}`)
		return ok && v == 1
	})
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")
	c2 := dial(t, n.URL)
	c2.resume(tok, sid, 2)
	// Observed once the hello is done, which may be just after the
	// client has its history_batch.
	actortest.Eventually(t, "tether_resume_seconds_count 1", func() bool {
		v, ok := n.metric(t, "tether_resume_seconds_count")
		if v > 1 {
			t.Fatalf("tether_resume_seconds_count %v, want 1", v)
		}
		return ok && v == 1
	})
	c2.closeNow()
	actortest.Eventually(t, "tether_connections 0", func() bool { v, ok := n.metric(t, "tether_connections"); return ok && v == 0 })
	_, _, body := do(t, "GET", n.HTTP+"/metrics", "", nil)
	for _, name := range []string{"tether_connections", "tether_sessions_active", "tether_wal_fsync_batch_requests", "tether_resume_seconds", "tether_errors_total"} {
		if !strings.Contains(string(body), "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func TestDevToken(t *testing.T) {
	t.Parallel()
	off := startNode(t, nodetest.Options{})
	if code, _, _ := do(t, "POST", off.HTTP+"/dev/token", "", strings.NewReader(`{"user":"alice"}`)); code != 404 {
		t.Fatalf("/dev/token without DevTokens: %d, want 404", code)
	}
	on := startNode(t, nodetest.Options{Gateway: gateway.Config{DevTokens: true}})
	code, _, body := do(t, "POST", on.HTTP+"/dev/token", "", strings.NewReader(`{"user":"alice"}`))
	if code != 200 {
		t.Fatalf("/dev/token: %d %s", code, body)
	}
	var r struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Token == "" {
		t.Fatalf("/dev/token body %s", body)
	}
	c := dial(t, on.URL)
	sid := checkSession(t, c.hello(r.Token, "", 0), false, "new", 0, 300)
	c.chat("a", "x")
	if s := on.snapshot(t, r.Token, sid); s.LastSeq != 2 {
		t.Fatalf("snapshot with a dev token: %+v", s)
	}
	// The dev token is for alice: alice's own token sees the session too.
	if s := on.snapshot(t, nodetest.Token(t, "alice"), sid); s.SessionID != sid {
		t.Fatal("the dev token is not alice's")
	}
	if code, _, _ := do(t, "POST", on.HTTP+"/dev/token", "", strings.NewReader(`{"user":""}`)); code != 400 {
		t.Errorf("/dev/token with an empty user: %d, want 400", code)
	}
	if code, _, _ := do(t, "POST", on.HTTP+"/dev/token", "", strings.NewReader(`not json`)); code != 400 {
		t.Errorf("/dev/token with a bad body: %d, want 400", code)
	}
}
