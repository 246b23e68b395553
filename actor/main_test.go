package actor

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tether-dev/tether/wal"
)

// Every test closes its Registry and then its wal.Log: goleak fails the
// package if an actor, a turn goroutine, a timer job or a Pebble goroutine
// is left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// t0 is the moment the pure machine tests and the manual clocks start at.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// waitTimeout bounds every wait on a condition; nothing waits on time.
const waitTimeout = 10 * time.Second

// eventually polls cond until it holds, failing after waitTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

// recv waits for a value on ch.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// ---- effects ----

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

// one returns the single effect of type T.
func one[T any](t *testing.T, effs []Effect) T {
	t.Helper()
	got := only[T](effs)
	if len(got) != 1 {
		var z T
		t.Fatalf("want exactly one %T, got %d in %v", z, len(got), effTypes(effs))
	}
	return got[0]
}

// outs returns what effs deliver, in order.
func outs(effs []Effect) []Out {
	var out []Out
	for _, d := range only[effDeliver](effs) {
		out = append(out, d.out)
	}
	return out
}

// ---- entries ----

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

// asUint reads an integer the way msgpack may have decoded it.
func asUint(v any) uint64 {
	switch v := v.(type) {
	case uint64:
		return v
	case uint32:
		return uint64(v)
	case uint16:
		return uint64(v)
	case uint8:
		return uint64(v)
	case int64:
		return uint64(v)
	case int32:
		return uint64(v)
	case int16:
		return uint64(v)
	case int8:
		return uint64(v)
	case int:
		return uint64(v)
	}
	return 0
}

func dumpOuts(os []Out) string {
	s := "["
	for i, o := range os {
		if i > 0 {
			s += ", "
		}
		switch o := o.(type) {
		case *EntryOut:
			s += fmt.Sprintf("entry{%d %s %q %v}", o.Entry.Seq, o.Entry.Role, o.Entry.Content, o.Entry.Metadata["status"])
		case *BatchOut:
			s += fmt.Sprintf("batch{seqs %v omitted %d}", seqsOf(o.Messages), o.Omitted)
		default:
			s += fmt.Sprintf("%T%+v", o, o)
		}
	}
	return s + "]"
}
