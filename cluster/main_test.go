package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes the memberships, links and servers it starts, so the
// package must end with no goroutine of ours.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
