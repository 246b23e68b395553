package bench

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// serverBin is the real tether binary (built once per test run, by the
// kit) for the tests that start local nodes.
var serverBin = nodetest.Binary

// Every test stops what it started: goleak fails the package if a user,
// client, reader or node-watching goroutine is left behind.
func TestMain(m *testing.M) {
	// A child of BenchmarkScale or TestScaleHarness (scale_client_test.go)
	// runs idle clients instead of tests.
	if os.Getenv(scaleClientEnv) != "" {
		os.Exit(scaleClientMain())
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	nodetest.RemoveBinary()
	os.Exit(code)
}
