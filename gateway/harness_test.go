package gateway_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway"
	tnode "github.com/tether-dev/tether/gateway/node"
	"github.com/tether-dev/tether/wal"
)

var testSecret = []byte("test-secret")

// node is a real in-process Tether node on 127.0.0.1 with a temp dir,
// assembled the way `tether serve` assembles one (package node).
type node struct {
	t     *testing.T
	URL   string // ws://…/v1/ws
	HTTP  string // http://…
	Log   *wal.Log
	Reg   *actor.Registry
	Srv   *gateway.Server
	clock *actortest.ManualClock
	// Metrics are the node's metrics, wired to the log and the registry.
	Metrics *gateway.Metrics
	// Dir is the node's Pebble directory.
	Dir  string
	stop func()
}

// Stop stops the node the way a graceful shutdown does (the cleanup calls
// it too); a node on the same Dir can then be started.
func (n *node) Stop() { n.stop() }

type nodeOpts struct {
	actor   actor.Config
	gateway gateway.Config
	fake    bool // use a manual clock for the registry
	// sndbuf, if set, fixes the server sockets' send buffer (bytes), so a
	// client that does not read is felt after a little data, not megabytes.
	sndbuf int
	// dir reuses a Pebble directory (a restart); default a fresh temp dir.
	dir string
}

func startNode(t *testing.T, o nodeOpts) *node {
	t.Helper()
	n := &node{t: t, Dir: o.dir}
	if n.Dir == "" {
		n.Dir = t.TempDir()
	}
	ac := o.actor
	if o.fake {
		n.clock = actortest.NewManualClock(time.Now())
		ac.Clock = n.clock
	}
	if ac.Logger == nil {
		ac.Logger = quiet
	}
	gc := o.gateway
	if gc.Logger == nil {
		gc.Logger = quiet
	}
	gc.Secret = testSecret
	ln, err := listen(o.sndbuf)
	if err != nil {
		t.Fatal(err)
	}
	nd, err := tnode.New(tnode.Config{Dir: n.Dir, Listener: ln, Actor: ac, Gateway: gc, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	n.Log, n.Reg, n.Srv, n.Metrics = nd.Log, nd.Registry, nd.Server, nd.Metrics
	n.HTTP, n.URL = nd.HTTP(), nd.URL()
	var once sync.Once
	n.stop = func() { once.Do(func() { _ = nd.Close() }) }
	t.Cleanup(n.stop)
	return n
}

func token(t *testing.T, user string) string {
	t.Helper()
	tok, err := gateway.Issue(testSecret, gateway.TokenSpec{User: user}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
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

// listen opens the node's listener; accepted sockets inherit its send
// buffer size when sndbuf is set.
func listen(sndbuf int) (net.Listener, error) {
	lc := net.ListenConfig{}
	if sndbuf > 0 {
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, sndbuf)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	return lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
}
