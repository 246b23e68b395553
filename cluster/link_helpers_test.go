package cluster

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// linkNode is a Link served by a real HTTP server on 127.0.0.1.
type linkNode struct {
	*Link
	srv  *httptest.Server
	addr string
}

// startLink serves a Link on addr ("" for an ephemeral port); cleanup
// closes both (stop does it earlier).
func startLink(t testing.TB, addr string, cfg LinkConfig) *linkNode {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	l, err := NewLink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return serveLink(t, l, ln, ln.Addr().String())
}

// serveLink serves l's Handler on ln (the link's address being addr) until
// the test ends.
func serveLink(t testing.TB, l *Link, ln net.Listener, addr string) *linkNode {
	mux := http.NewServeMux()
	mux.Handle("/v1/link", l.Handler())
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	srv.Start()
	n := &linkNode{Link: l, srv: srv, addr: addr}
	t.Cleanup(n.stop)
	return n
}

func (n *linkNode) stop() {
	_ = n.Close()
	n.srv.Close()
}

// echoServe answers "echo" with its request, "from" with the caller's id.
func echoServe(ctx context.Context, from string, method Op, body msgpack.RawMessage) (any, error) {
	switch method {
	case "echo":
		return body, nil
	case "from":
		return from, nil
	}
	return nil, WithCode("no_method", errUnknownMethod)
}

var errUnknownMethod = errors.New("unknown method")

// accepted counts the connections peers dialed to l.
func (l *Link) acceptedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted)
}

// startHTTP serves h on 127.0.0.1 until the test ends; returns host:port.
func startHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}
