package gateway_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes what it starts (startNode's cleanup closes the server,
// the registry and the log; dial's closes the client socket; httpc keeps no
// idle connections), so the package must end with no goroutine of ours.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
