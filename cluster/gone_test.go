package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/wal"
)

// An actor stopped under a call (a configuration gave its session to
// another node, and moveAway stopped it) is not the owner failing: route
// tries again with the owner found anew, and a gateway that forwarded the
// hello here is told unavailable, which it retries, not a failure it
// passes on to the client as internal (TestClusterLinkTLS met one while
// its two nodes were still agreeing on their configuration).
func TestGoneActorIsRetried(t *testing.T) {
	gone := fmt.Errorf("attach: %w", actor.ErrGone)
	if !retried(gone) || !retried(fmt.Errorf("claim: %w", ErrUnavailable)) {
		t.Error("a stopped actor or an unavailable owner is not retried")
	}
	for _, err := range []error{actor.ErrNotFound, wal.ErrExists, actor.ErrTooManySessions, errors.New("disk full")} {
		if retried(err) {
			t.Errorf("%v is retried", err)
		}
	}
	code := ErrorCode(withActorCode(gone))
	if code != codeUnavailable {
		t.Fatalf("a stopped actor crosses the link as %q, want %q", code, codeUnavailable)
	}
	if !errors.Is(actorErr(code, gone.Error()), ErrUnavailable) {
		t.Error("the forwarding node does not read it as unavailable")
	}
}
