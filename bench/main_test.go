package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// binDir holds the tether binary, built once by serverBin.
var binDir struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// serverBin builds the real tether binary (once per test run) for the
// tests that start local nodes.
func serverBin(t testing.TB) string {
	t.Helper()
	binDir.once.Do(func() {
		binDir.dir, binDir.err = os.MkdirTemp("", "tether-bench-bin-")
		if binDir.err != nil {
			return
		}
		binDir.bin = filepath.Join(binDir.dir, "tether")
		build := exec.Command("go", "build", "-o", binDir.bin, "github.com/tether-dev/tether/cmd/tether")
		if out, err := build.CombinedOutput(); err != nil {
			binDir.err = fmt.Errorf("build tether: %w\n%s", err, out)
		}
	})
	if binDir.err != nil {
		t.Fatal(binDir.err)
	}
	return binDir.bin
}

// Every test stops what it started: goleak fails the package if a user,
// client, reader or node-watching goroutine is left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	if binDir.dir != "" {
		_ = os.RemoveAll(binDir.dir)
	}
	os.Exit(code)
}
