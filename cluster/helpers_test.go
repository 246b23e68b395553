package cluster

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
)

// quiet is the logger of test components (actortest.Quiet).
var quiet = actortest.Quiet()

// waitFor is how long eventually polls before failing: generous, since the
// machine is shared.
const waitFor = 20 * time.Second

// waitClosed waits for ch to be closed, failing the test after waitFor.
func waitClosed(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// logRecorder is a slog handler that keeps messages (at any level) so a
// test can wait for something to have been logged, and passes them on to
// quiet.
type logRecorder struct {
	mu    *sync.Mutex
	lines *[]string
	attrs string
}

func newLogRecorder() (*slog.Logger, *logRecorder) {
	r := &logRecorder{mu: new(sync.Mutex), lines: new([]string)}
	return slog.New(r), r
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(ctx context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message + r.attrs)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	r.mu.Lock()
	*r.lines = append(*r.lines, b.String())
	r.mu.Unlock()
	if quiet.Enabled(ctx, rec.Level) {
		return quiet.Handler().Handle(ctx, rec)
	}
	return nil
}

func (r *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *r
	for _, a := range as {
		c.attrs += " " + a.String()
	}
	return &c
}

func (r *logRecorder) WithGroup(string) slog.Handler { return r }

// count returns how many records contain every one of parts.
func (r *logRecorder) count(parts ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
next:
	for _, l := range *r.lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		n++
	}
	return n
}
