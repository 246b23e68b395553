package actortest

import (
	"fmt"
	"strings"
	"testing"
)

// recordingTB is a testing.TB whose failure, cleanups and output the
// test controls.
type recordingTB struct {
	testing.TB
	failed   bool
	cleanups []func()
	out      []string
}

func (r *recordingTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Failed() bool     { return r.failed }
func (r *recordingTB) Logf(format string, args ...any) {
	r.out = append(r.out, fmt.Sprintf(format, args...))
}
func (r *recordingTB) finish() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// A passing test prints nothing of what was logged; a failing one prints
// the newest Kept lines, oldest first, and says that earlier ones went.
func TestLoggerPrintsTheLastLinesOnFailure(t *testing.T) {
	t.Setenv("TETHER_TEST_LOG", "")
	pass := &recordingTB{TB: t}
	Logger(pass).Info("hidden")
	pass.finish()
	if len(pass.out) != 0 {
		t.Fatalf("a passing test printed %q", pass.out)
	}

	fail := &recordingTB{TB: t}
	log := Logger(fail)
	for i := range Kept + 5 {
		log.Info("line", "n", i)
	}
	log.Debug("below Info")
	fail.failed = true
	fail.finish()
	if len(fail.out) != 1 {
		t.Fatalf("printed %d times, want once", len(fail.out))
	}
	got := strings.Split(strings.TrimSpace(fail.out[0]), "\n")
	if len(got) != Kept+2 || !strings.Contains(got[1], "earlier lines dropped") {
		t.Fatalf("printed %d lines, want a heading, a note and %d:\n%s", len(got), Kept, fail.out[0])
	}
	if !strings.Contains(got[2], "n=5") || !strings.Contains(got[len(got)-1], fmt.Sprintf("n=%d", Kept+4)) {
		t.Fatalf("first and last kept lines: %q … %q, want n=5 … n=%d", got[2], got[len(got)-1], Kept+4)
	}
	if strings.Contains(fail.out[0], "below Info") {
		t.Error("a Debug line was kept")
	}
}
