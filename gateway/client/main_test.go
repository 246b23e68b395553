package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/gateway/wire"
)

// Every test closes its clients and servers: goleak fails the package if
// a manager, reader, dial or server goroutine is left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

const wait = 10 * time.Second

// node is a real in-process node (package nodetest), or another gateway
// in front of its registry.
type node struct {
	addr   string // host:port
	secret []byte
	srv    *gateway.Server
}

func (n *node) url() string { return "ws://" + n.addr + "/v1/ws" }

type nodeOpts struct {
	replayLimit int
	maxFrame    int64
	secrets     [][]byte // per front; default nodetest.Secret
	engine      engine.Engine
	fronts      int // gateways sharing the registry; default 1
}

// newNode starts a node (and o.fronts-1 gateways in front of it: newNodes)
// and returns it.
func newNode(t *testing.T, o nodeOpts) *node {
	ns := newNodes(t, o)
	return ns[0]
}

// newNodes starts a node and o.fronts-1 more gateways in front of its
// registry (clients that move between "nodes" without a cluster); the
// node is first.
func newNodes(t *testing.T, o nodeOpts) []*node {
	t.Helper()
	secretFor := func(i int) []byte {
		if i < len(o.secrets) {
			return o.secrets[i]
		}
		return []byte(nodetest.Secret)
	}
	gc := func(i int) gateway.Config {
		return gateway.Config{Secret: secretFor(i), NoRateLimit: true, MaxFrame: o.maxFrame, Logger: quiet}
	}
	nd := nodetest.Start(t, nodetest.Options{
		Gateway: gc(0), Actor: actor.Config{ReplayLimit: o.replayLimit, Engine: o.engine},
	})
	nodes := []*node{{addr: nd.Addr, secret: secretFor(0), srv: nd.Server}}
	var served []chan struct{}
	for i := 1; i < max(o.fronts, 1); i++ {
		cfg := gc(i)
		cfg.Backend = gateway.Local(nd.Registry)
		srv, err := gateway.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.Serve(ln)
		}()
		served = append(served, done)
		nodes = append(nodes, &node{addr: ln.Addr().String(), secret: cfg.Secret, srv: srv})
	}
	// Runs before the kit's cleanup: the fronts stop taking connections,
	// the node closes (the sessions' clients are told 1012), then the
	// fronts close what they still hold. The kit's Close is then a no-op.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, n := range nodes[1:] {
			_ = n.srv.Shutdown(ctx)
		}
		_ = nd.Close()
		for i, n := range nodes[1:] {
			n.srv.Close()
			<-served[i]
		}
	})
	return nodes
}

// token issues user a token with the kit's secret, logged in authAge ago.
func (n *node) token(t *testing.T, user string, authAge time.Duration) string {
	t.Helper()
	if !bytes.Equal(n.secret, []byte(nodetest.Secret)) {
		t.Fatalf("node %s checks tokens with its own secret: issue them with gateway.Issue", n.addr)
	}
	return nodetest.Issue(t, gateway.TokenSpec{User: user, AuthAge: authAge})
}

// snapshot reads GET /v1/sessions/{id}.
func (n *node) snapshot(t *testing.T, sid, token string) wire.Snapshot {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+n.addr+"/v1/sessions/"+sid, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("snapshot: HTTP %s", resp.Status)
	}
	var s wire.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// dial connects a client and closes it at the end of the test.
func dial(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 10 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// collect reads n entries from c.Messages.
func collect(t *testing.T, c *Client, n int) []wire.Message {
	t.Helper()
	timeout := time.After(wait)
	var out []wire.Message
	for len(out) < n {
		select {
		case m, ok := <-c.Messages():
			if !ok {
				t.Fatalf("Messages closed after %d of %d entries (err %v)", len(out), n, c.Err())
			}
			out = append(out, m)
		case <-timeout:
			t.Fatalf("got %d of %d entries in time", len(out), n)
		}
	}
	return out
}

// contiguous checks that msgs are seqs from, from+1, ... with nothing
// missing or repeated.
func contiguous(t *testing.T, msgs []wire.Message, from uint64) {
	t.Helper()
	for i, m := range msgs {
		if want := from + uint64(i); m.Seq != want {
			t.Fatalf("entry %d has seq %d, want %d (all: %v)", i, m.Seq, want, seqs(msgs))
		}
	}
}

func seqs(msgs []wire.Message) []uint64 {
	s := make([]uint64, len(msgs))
	for i, m := range msgs {
		s[i] = m.Seq
	}
	return s
}

// ended waits for c to end and returns why.
func ended(t *testing.T, c *Client) error {
	t.Helper()
	select {
	case <-c.Done():
		return c.Err()
	case <-time.After(wait):
		t.Fatal("client did not end")
		return nil
	}
}

// deadURL is a ws URL on a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return fmt.Sprintf("ws://%s/v1/ws", addr)
}
