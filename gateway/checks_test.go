package gateway_test

// Issue 6, items 3 and 4: the hello deadline cannot be stretched, and no
// path reveals a sensitive session to a stale login or accepts a login
// from the future.

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// TestHelloDeadlineAbsolute: a connection that keeps the line busy with
// WebSocket pings and pongs (which used to push the read deadline out to
// the pong wait) but never says hello is closed with 1008 at the hello
// timeout.
func TestHelloDeadlineAbsolute(t *testing.T) {
	t.Parallel()
	const helloTimeout = time.Second
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{HelloTimeout: helloTimeout, PingInterval: 50 * time.Millisecond, PongWait: time.Minute}})
	c := dial(t, n.URL)
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			dl := time.Now().Add(time.Second)
			if c.ws.WriteControl(websocket.PongMessage, []byte("alive"), dl) != nil ||
				c.ws.WriteControl(websocket.PingMessage, []byte("alive?"), dl) != nil {
				return
			}
		}
	}()
	code, frames := c.closeCode() // fails the test if no close frame comes within 15s
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if code != 1008 {
		t.Fatalf("closed with %d, want 1008", code)
	}
	errorThenClose(t, "no hello", frames, "bad_request")
	if took < helloTimeout {
		t.Fatalf("closed after %v, before the hello timeout of %v", took, helloTimeout)
	}
	t.Logf("closed %v after the upgrade (hello timeout %v)", took.Round(time.Millisecond), helloTimeout)
}

// TestSnapshotSensitive: GET /v1/sessions/{id} applies the same rule as a
// resume. A sensitive session is shown only to a token whose auth_time is
// at most --reauth-max-age old (403 reauth_required otherwise, the
// session untouched); a stranger still gets 404 whatever their login.
func TestSnapshotSensitive(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	fresh := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(fresh, "", 0), false, "new", 0, 300)
	c.chat("r", "receipt #4411, 129.90 EUR")
	c.send(map[string]any{"type": "context", "set": map[string]any{"sensitive": true, "card": "4111…1111"}})
	c.readType("context")
	c.closeNow()
	before := n.waitStatus(t, fresh, sid, "interrupted")

	url := n.HTTP + "/v1/sessions/" + sid
	for name, tok := range map[string]string{
		"no auth_time":      nodetest.Issue(t, gateway.TokenSpec{User: "alice", AuthAge: -1}),
		"auth_time 10m ago": nodetest.Issue(t, gateway.TokenSpec{User: "alice", AuthAge: 10 * time.Minute}),
		"auth_time 6m ago":  nodetest.Issue(t, gateway.TokenSpec{User: "alice", AuthAge: 6 * time.Minute}),
	} {
		code, _, body := do(t, "GET", url, "Bearer "+tok, nil)
		var e map[string]any
		_ = json.Unmarshal(body, &e)
		if code != http.StatusForbidden || e["code"] != "reauth_required" {
			t.Fatalf("%s: HTTP %d %s, want 403 reauth_required", name, code, body)
		}
		for _, leak := range []string{"receipt", "4111", "card"} {
			if strings.Contains(string(body), leak) {
				t.Fatalf("%s: the refusal leaks %q: %s", name, leak, body)
			}
		}
	}
	// Strangers: 404, fresh login or not.
	for name, tok := range map[string]string{
		"bob fresh": nodetest.Token(t, "bob"),
		"bob stale": nodetest.Issue(t, gateway.TokenSpec{User: "bob", AuthAge: time.Hour}),
	} {
		if code := getJSON(t, url, tok, nil); code != http.StatusNotFound {
			t.Fatalf("%s: HTTP %d, want 404", name, code)
		}
	}
	// A fresh login (within the 5m default) sees it; nothing changed.
	for _, age := range []time.Duration{0, 4 * time.Minute} {
		s := n.snapshot(t, nodetest.Issue(t, gateway.TokenSpec{User: "alice", AuthAge: age}), sid)
		if !s.Sensitive || s.Context["card"] != "4111…1111" || len(s.Messages) != 2 {
			t.Fatalf("fresh snapshot (auth %v ago): %+v", age, s)
		}
		if s.Status != "interrupted" || s.LastSeq != before.LastSeq || s.LastActiveAt != before.LastActiveAt {
			t.Fatalf("refused reads changed the session: before %+v after %+v", before, s)
		}
	}
}

// TestAuthTimeInFuture: an auth_time beyond the 30 s clock leeway in the
// future is an invalid token (it would count as a fresh login for ever):
// 401 over HTTP, unauthorized + 1008 over the WebSocket. Within the leeway
// it is accepted.
func TestAuthTimeInFuture(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	owner := nodetest.Token(t, "alice")
	sid := liveSession(t, n, owner)
	now := time.Now()
	withAuth := func(at time.Time) string {
		return signed(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{
			"sub": "alice", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "auth_time": at.Unix(),
		})
	}
	for name, tok := range map[string]string{
		"1 min ahead": withAuth(now.Add(time.Minute)),
		"1 day ahead": withAuth(now.Add(24 * time.Hour)),
		"year 3000":   withAuth(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)),
		"45 s ahead":  withAuth(now.Add(45 * time.Second)),
	} {
		if code, _, body := do(t, "GET", n.HTTP+"/v1/sessions/"+sid, "Bearer "+tok, nil); code != http.StatusUnauthorized {
			t.Fatalf("%s: snapshot HTTP %d %s, want 401", name, code, body)
		}
		for _, target := range []string{"", sid} {
			c := dial(t, n.URL)
			h := map[string]any{"type": "hello", "token": tok}
			if target != "" {
				h["session_id"] = target
			}
			c.send(h)
			frames := c.expectClose(1008)
			if len(frames) != 1 {
				t.Fatalf("%s: want one error before 1008, got %v", name, frames)
			}
			errorThenClose(t, name, frames, "unauthorized")
		}
	}
	// Within the leeway: a valid token.
	ok := withAuth(now.Add(10 * time.Second))
	if code := getJSON(t, n.HTTP+"/v1/sessions/"+sid, ok, nil); code != http.StatusOK {
		t.Fatalf("auth_time 10 s ahead: HTTP %d, want 200", code)
	}
	c := dial(t, n.URL)
	c.resume(ok, sid, 2)
}
