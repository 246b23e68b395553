package actor

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tether-dev/tether/wal"
)

// Every test must close its Registry and then its wal.Log: goleak fails the
// package if an actor, a tool run or a Pebble goroutine is left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// t0 is the fake "now" the pure machine tests start from.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a Config.Now the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(at time.Time) *fakeClock { return &fakeClock{now: at} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// ---- small helpers on effects and entries ----

// effTypes names the effects, in order, for readable failure messages.
func effTypes(effs []Effect) []string {
	out := make([]string, len(effs))
	for i, e := range effs {
		out[i] = fmt.Sprintf("%T", e)
	}
	return out
}

// wantTypes checks that effs are exactly the given effect types, in order.
func wantTypes(t *testing.T, what string, effs []Effect, want ...Effect) {
	t.Helper()
	w := make([]string, len(want))
	for i, e := range want {
		w[i] = fmt.Sprintf("%T", e)
	}
	if got := effTypes(effs); !slices.Equal(got, w) {
		t.Fatalf("%s: effects %v, want %v\n%+v", what, got, w, effs)
	}
}

// only returns the effects of type T, in order.
func only[T any](effs []Effect) []T {
	var out []T
	for _, e := range effs {
		if v, ok := e.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// one returns the single effect of type T, failing otherwise.
func one[T any](t *testing.T, effs []Effect) T {
	t.Helper()
	got := only[T](effs)
	if len(got) != 1 {
		var z T
		t.Fatalf("want exactly one %T, got %d in %v", z, len(got), effTypes(effs))
	}
	return got[0]
}

// index is the position of the first effect of type T, or -1.
func index[T any](effs []Effect) int {
	for i, e := range effs {
		if _, ok := e.(T); ok {
			return i
		}
	}
	return -1
}

func seqsOf(es []wal.Entry) []uint64 {
	out := make([]uint64, 0, len(es))
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func span(from, to uint64) []uint64 {
	out := []uint64{}
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func mdString(e wal.Entry, key string) string {
	s, _ := e.Metadata[key].(string)
	return s
}

// sameMeta compares metadata the way a client sees it: times by instant
// (msgpack drops the location) and everything else exactly.
func sameMeta(a, b wal.Meta) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) || !a.LastActiveAt.Equal(b.LastActiveAt) ||
		!a.InterruptedAt.Equal(b.InterruptedAt) || !a.ExpiresAt.Equal(b.ExpiresAt) {
		return false
	}
	a.CreatedAt, a.LastActiveAt, a.InterruptedAt, a.ExpiresAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	b.CreatedAt, b.LastActiveAt, b.InterruptedAt, b.ExpiresAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}
