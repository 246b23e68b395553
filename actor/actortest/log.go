package actortest

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// Kept is how many of the newest log lines Logger keeps for a failure,
// and the longest line it keeps whole, in bytes.
const (
	Kept        = 300
	keptLineLen = 2 << 10
)

// Logger is the logger for what a test starts (nodes, servers): quiet
// while the test passes, and when it fails the last Kept lines they
// logged at Info and above are printed with the test's output, so that
// a failure seen once, in a loaded CI run, says what the nodes were
// doing. With TETHER_TEST_LOG set it is Quiet's logger instead, which
// writes everything to stderr as it happens.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("TETHER_TEST_LOG") != "" {
		return Quiet()
	}
	r := &ring{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last %d lines logged (TETHER_TEST_LOG=1 shows all):\n%s", Kept, r.String())
		}
	})
	return slog.New(slog.NewTextHandler(r, nil))
}

// Quiet is the logger for test components that no one test owns:
// silent, unless TETHER_TEST_LOG=1 (everything at Info and above to
// stderr) or TETHER_TEST_LOG=debug (Debug too, memberlist's among it).
func Quiet() *slog.Logger {
	switch os.Getenv("TETHER_TEST_LOG") {
	case "":
		return slog.New(slog.DiscardHandler)
	case "debug":
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// ring keeps the newest Kept lines written to it; the text handler writes
// one record per Write.
type ring struct {
	mu    sync.Mutex
	lines []string
	next  int  // where the next line goes once lines is full
	lost  bool // a line was dropped for a newer one
}

func (r *ring) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	if len(line) > keptLineLen {
		line = line[:keptLineLen] + "…"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) < Kept {
		r.lines = append(r.lines, line)
		return len(p), nil
	}
	r.lines[r.next] = line
	r.next = (r.next + 1) % Kept
	r.lost = true
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	if r.lost {
		b.WriteString("… (earlier lines dropped)\n")
	}
	for i := range r.lines {
		b.WriteString(r.lines[(r.next+i)%len(r.lines)])
		b.WriteByte('\n')
	}
	return b.String()
}
