package web_test

// Real `tether serve` processes for the browser tests, and a small Go
// WebSocket client to seed sessions and to read what the server stored.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// server is one running `tether serve`.
type server struct {
	*nodetest.Proc
	t    *testing.T
	addr string // host:port it listens on
}

// startServer starts `tether serve` on a fresh data directory with extra
// flags (--dev-tokens and --agent are up to the caller) and waits until it
// accepts connections. The process is stopped when the test ends.
func startServer(t *testing.T, extra ...string) *server {
	t.Helper()
	s, err := tryServer(t, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tryServer is startServer returning the failure to start (with the
// process's log), so that a test can tell an older binary's refusal of
// a flag from another failure.
func tryServer(t *testing.T, extra ...string) (*server, error) {
	t.Helper()
	p := nodetest.StartServe(t, nodetest.ServeOptions{
		Args:   append([]string{"--gossip", "127.0.0.1:0"}, extra...),
		NoWait: true, // the failure to listen is returned, not fatal
	})
	s := &server{Proc: p, t: t}
	// Registered after the kit's cleanup, so it runs first: the graceful
	// path, and the whole log once the process is gone.
	t.Cleanup(s.stop)
	if err := p.WaitListening(30 * time.Second); err != nil {
		return nil, fmt.Errorf("tether serve %v: %w:\n%s", extra, err, p.Stderr())
	}
	s.addr = p.Addr
	return s, nil
}

// stop sends SIGTERM (the graceful path) and SIGKILL if that takes long.
func (s *server) stop() {
	s.Stop(15 * time.Second)
	if s.t.Failed() {
		s.t.Logf("server %s log:\n%s", s.addr, s.Stderr())
	}
}

func (s *server) url(path string) string { return "http://" + s.addr + path }

// httpClient makes one-off requests: no pooled connection (and no goroutine
// of one) outlives a request.
func httpClient() *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// devToken asks POST /dev/token for a token of user.
func (s *server) devToken(user string) string {
	s.t.Helper()
	resp, err := httpClient().Post(s.url("/dev/token"), "application/json", strings.NewReader(fmt.Sprintf(`{"user":%q}`, user)))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Token == "" {
		s.t.Fatalf("POST /dev/token: HTTP %d, %v", resp.StatusCode, err)
	}
	return body.Token
}

// mintToken runs `tether token` with the server's secret (and extra flags).
func mintToken(t *testing.T, user, secret string, extra ...string) string {
	t.Helper()
	out, err := exec.Command(nodetest.Binary(t), append([]string{"token", "--user", user, "--secret", secret}, extra...)...).Output()
	if err != nil {
		t.Fatalf("tether token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

type entry struct {
	Seq      uint64         `json:"seq"`
	Role     string         `json:"role"`
	Content  string         `json:"content"`
	Metadata map[string]any `json:"metadata"`
}

type snapshot struct {
	SessionID string  `json:"session_id"`
	Status    string  `json:"status"`
	LastSeq   uint64  `json:"last_seq"`
	Messages  []entry `json:"messages"`
}

// snapshot is GET /v1/sessions/{id}: the newest entries the server stored.
func (s *server) snapshot(token, id string) snapshot {
	s.t.Helper()
	req, err := http.NewRequest("GET", s.url("/v1/sessions/"+id), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var snap snapshot
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil || resp.StatusCode != 200 {
		s.t.Fatalf("GET /v1/sessions/%s: HTTP %d, %v", id, resp.StatusCode, err)
	}
	return snap
}

// countStored counts the stored user entries with exactly this content.
func (s *server) countStored(token, id, content string) int {
	n := 0
	for _, m := range s.snapshot(token, id).Messages {
		if m.Role == "user" && m.Content == content {
			n++
		}
	}
	return n
}

// seedSession makes a new session of the token's user over a plain
// WebSocket, sends each message once the agent answered the one before,
// and waits until the log holds want entries. It returns the session id.
func (s *server) seedSession(token string, msgs []string, want uint64) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+s.addr+"/v1/ws", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(60 * time.Second))
	if err := ws.WriteJSON(map[string]any{"type": "hello", "token": token}); err != nil {
		s.t.Fatal(err)
	}
	var id string
	var last uint64
	sent := 0
	for last < want {
		var f struct {
			Type      string `json:"type"`
			SessionID string `json:"session_id"`
			Seq       uint64 `json:"seq"`
			Role      string `json:"role"`
			Code      string `json:"code"`
		}
		if err := ws.ReadJSON(&f); err != nil {
			s.t.Fatalf("seeding: read: %v (last seq %d)", err, last)
		}
		switch f.Type {
		case "session":
			id = f.SessionID
		case "message":
			last = f.Seq
		case "error":
			s.t.Fatalf("seeding: error %s", f.Code)
		}
		// The next message once the previous turn is answered, so turns do
		// not interleave.
		if (f.Type == "session" || f.Type == "message" && f.Role == "agent") && sent < len(msgs) {
			if err := ws.WriteJSON(map[string]any{"type": "send", "id": fmt.Sprintf("seed-%d", sent), "content": msgs[sent]}); err != nil {
				s.t.Fatal(err)
			}
			sent++
		}
	}
	_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	return id
}
