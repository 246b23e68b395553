package machine

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/wal/record"
)

// t0 is the moment the machine tests start at.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

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
	for _, d := range only[Deliver](effs) {
		out = append(out, d.Out)
	}
	return out
}

// ---- entries ----

func seqsOf(es []record.Entry) []uint64 {
	out := make([]uint64, 0, len(es))
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

// The machine's windows in these tests.
const (
	testWindow = 5 * time.Minute
	testIdle   = time.Minute
	testReauth = 5 * time.Minute
)

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

func notResumedReason(err error) string {
	var nr *NotResumedError
	if errors.As(err, &nr) && errors.Is(err, ErrNotResumed) {
		return nr.Reason
	}
	return ""
}
