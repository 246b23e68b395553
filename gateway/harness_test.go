package gateway_test

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// testSecret is the kit's secret, for the tests that sign tokens by hand
// (other algorithms, odd claims).
var testSecret = []byte(nodetest.Secret)

// node is a real in-process node (package nodetest) with this package's
// HTTP helpers (snapshot, waitStatus, metric; helpers_test.go).
type node struct{ *nodetest.Node }

// startNode starts a node for the test (nodetest.Start).
func startNode(t *testing.T, o nodetest.Options) *node {
	t.Helper()
	return &node{nodetest.Start(t, o)}
}

// serveBackend serves a gateway over backend (a node's own, wrapped to
// make something happen at the right moment) on a loopback port until
// the test ends, and returns its WebSocket URL.
func serveBackend(t *testing.T, backend gateway.Backend) string {
	t.Helper()
	srv, err := gateway.New(gateway.Config{Backend: backend, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) {
			t.Error(err)
		}
	})
	return "ws://" + ln.Addr().String() + "/v1/ws"
}

// wsc is a raw protocol-level client.
type wsc struct {
	t  *testing.T
	ws *websocket.Conn
}

func dial(t *testing.T, url string) *wsc {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c := &wsc{t: t, ws: ws}
	t.Cleanup(func() { ws.Close() })
	return c
}

func (c *wsc) send(v any) {
	c.t.Helper()
	if err := c.ws.WriteJSON(v); err != nil {
		c.t.Fatal(err)
	}
}

func (c *wsc) raw(mt int, b []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(mt, b); err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next frame as a generic map; it fails the test on a
// close or after 10s.
func (c *wsc) read() map[string]any {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("server frame is not JSON: %q", b)
	}
	return m
}

// readType reads the next frame and checks its type.
func (c *wsc) readType(typ string) map[string]any {
	c.t.Helper()
	m := c.read()
	if m["type"] != typ {
		c.t.Fatalf("want %s frame, got %v", typ, m)
	}
	return m
}

// closeCode reads until the server closes and returns the close code;
// frames read on the way are returned too.
func (c *wsc) closeCode() (int, []map[string]any) {
	c.t.Helper()
	var frames []map[string]any
	for {
		_ = c.ws.SetReadDeadline(time.Now().Add(15 * time.Second))
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			if ce, ok := err.(*websocket.CloseError); ok {
				return ce.Code, frames
			}
			c.t.Fatalf("want a close frame, got %v", err)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		frames = append(frames, m)
	}
}

func (c *wsc) hello(tok, sid string, lastSeq uint64) map[string]any {
	c.t.Helper()
	h := map[string]any{"type": "hello", "token": tok}
	if sid != "" {
		h["session_id"] = sid
		h["last_seq"] = lastSeq
	}
	c.send(h)
	return c.readType("session")
}

func getJSON(t *testing.T, url, tok string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}
