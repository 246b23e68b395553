package gateway_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/gateway/wire"
)

// goneUnder is the node's own backend, except that the session's actor
// stops under every open (actor.ErrGone), as a configuration that moves
// the session to another node stops it.
type goneUnder struct{ gateway.Backend }

func (goneUnder) Create(context.Context, actor.CreateRequest) (actor.Session, error) {
	return nil, fmt.Errorf("attach: %w", actor.ErrGone)
}

func (goneUnder) Resume(context.Context, actor.ResumeRequest) (actor.Session, error) {
	return nil, fmt.Errorf("attach: %w", actor.ErrGone)
}

// TestHelloWhoseActorStopped: a hello whose session's actor stopped while
// it was being opened is told to retry (unavailable, 1013), not that the
// server failed (internal, 1011): a retry finds the session where it went.
func TestHelloWhoseActorStopped(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	url := serveBackend(t, goneUnder{gateway.Local(n.Registry)})
	tok := nodetest.Token(t, "alice")
	for _, hello := range []map[string]any{
		{"type": "hello", "token": tok},
		{"type": "hello", "token": tok, "session_id": "s-elsewhere", "last_seq": 3},
	} {
		c := dial(t, url)
		c.send(hello)
		frames := c.expectClose(wire.CloseTryAgain)
		if len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != wire.CodeUnavailable {
			t.Errorf("hello %v: frames %v, want one unavailable error", hello, frames)
		}
	}
}
