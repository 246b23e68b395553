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
// doing. TETHER_TEST_LOG=1 writes everything to stderr as it happens
// instead, and TETHER_TEST_LOG=debug includes Debug lines (memberlist's
// among them).
func Logger(t testing.TB) *slog.Logger {
	switch os.Getenv("TETHER_TEST_LOG") {
	case "":
	case "debug":
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	default:
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	r := &ring{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last %d lines logged (TETHER_TEST_LOG=1 shows all):\n%s", Kept, r.String())
		}
	})
	return slog.New(slog.NewTextHandler(r, nil))
}

// ring keeps the newest Kept lines written to it; the text handler writes
// one record per Write.
type ring struct {
	mu    sync.Mutex
	lines []string
	next  int // where the next line goes once lines is full
	lost  int // lines dropped for newer ones
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
	r.lost++
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	if r.lost > 0 {
		b.WriteString("… (earlier lines dropped)\n")
	}
	for i := range r.lines {
		b.WriteString(r.lines[(r.next+i)%len(r.lines)])
		b.WriteByte('\n')
	}
	return b.String()
}
