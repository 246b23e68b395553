package nodetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// built is the tether binary Binary builds, once per test binary: every
// test of a package shares it, as each package's TestMain once built it.
var built struct {
	once sync.Once
	dir  string // the temporary directory holding it
	path string
	err  error
}

// Binary builds cmd/tether (once per test binary, into a temporary
// directory) and returns the binary's path; it fails the test if the
// build does. The build is a plain `go build` in the test's environment:
// GOFLAGS applies, and without -race in it the binary has no race
// detector even under `go test -race`, so that the processes a test
// starts run at the speed they are measured at. It is this tree's code,
// never a bin/tether left by an earlier make. A package's TestMain calls
// RemoveBinary after m.Run to remove it.
func Binary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "tether-bin-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "tether")
		// By import path, so that the test's working directory (any
		// package of the module) does not matter.
		build := exec.Command("go", "build", "-o", built.path, "github.com/tether-dev/tether/cmd/tether")
		if out, err := build.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build tether: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatalf("nodetest: %v", built.err)
	}
	return built.path
}

// RemoveBinary removes the directory Binary built into, if it did: the
// binary is shared by all the tests of a package, so no test's cleanup
// can remove it, and a TestMain calls this after m.Run instead.
func RemoveBinary() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}
