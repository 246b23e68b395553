package node_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes the nodes it starts (gossip, node link, actors,
// stores): the package must end with no goroutine of theirs.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
