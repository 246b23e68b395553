package nodetest

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node"
)

// Options shape a node; the zero value is a node with the defaults of
// actor.Config and gateway.Config, accepting tokens signed with Secret.
type Options struct {
	// Actor configures the registry (the node sets Journal and Store).
	Actor actor.Config
	// Gateway configures the server (the node sets Backend and Metrics);
	// Secret defaults to Secret.
	Gateway gateway.Config
	// ManualClock gives the registry an actortest.ManualClock (Node.Clock)
	// instead of Actor.Clock, so that a test moves the sessions' time
	// (windows, idle deadlines, deletion) without waiting for it.
	ManualClock bool
	// Dir is the Pebble directory; default a new t.TempDir(). A test
	// restarts a node by closing it and starting another on its Dir.
	Dir string
	// SendBuffer, if positive, fixes the send buffer (bytes) of the
	// sockets the node accepts, so that a client that does not read is
	// felt after a little data rather than after the kernel's megabytes.
	SendBuffer int
}

// Node is a running in-process node. It embeds the assembled node, so a
// test reaches its Log, Registry, Server and Metrics, and may Close it
// before the test ends (to restart on Dir); closing twice is safe.
type Node struct {
	*node.Node
	// URL is the WebSocket URL, ws://127.0.0.1:port/v1/ws, and HTTP the
	// base URL, http://127.0.0.1:port: node.Node's URL() and HTTP() as
	// fields (hiding those methods), as httptest.Server keeps its URL.
	URL, HTTP string
	// Dir is the node's Pebble directory.
	Dir string
	// Clock is the registry's clock with Options.ManualClock; else nil.
	Clock *actortest.ManualClock
}

// Start starts a node on 127.0.0.1 (an ephemeral port) and closes it when
// the test ends. It fails the test if the node does not start.
func Start(t testing.TB, o Options) *Node {
	t.Helper()
	n, err := start(t, o)
	if err != nil {
		t.Fatalf("nodetest: %v", err)
	}
	return n
}

func start(t testing.TB, o Options) (*Node, error) {
	n := &Node{Dir: o.Dir}
	if n.Dir == "" {
		// Made before the node's cleanup is registered, so removed after
		// the node has closed its store (cleanups run last first).
		n.Dir = t.TempDir()
	}
	ac := o.Actor
	if o.ManualClock {
		n.Clock = actortest.NewManualClock(time.Now())
		ac.Clock = n.Clock
	}
	gc := o.Gateway
	if gc.Secret == nil {
		gc.Secret = []byte(Secret)
	}
	ln, err := listen(o.SendBuffer)
	if err != nil {
		return nil, err
	}
	// node.New closes the listener if it fails.
	nd, err := node.New(node.Config{Dir: n.Dir, Listener: ln, Actor: ac, Gateway: gc, Logger: actortest.Logger(t)})
	if err != nil {
		return nil, fmt.Errorf("start a node in %s: %w", n.Dir, err)
	}
	// Close's error is not the test's concern: a test that closes the
	// node itself (to restart it) asks Close, and a failing store shows
	// in what the test checks.
	t.Cleanup(func() { _ = nd.Close() })
	n.Node, n.URL, n.HTTP = nd, nd.URL(), nd.HTTP()
	return n, nil
}

// listen opens the node's listener on 127.0.0.1; the sockets it accepts
// inherit its send buffer size when sndbuf is set.
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
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}
