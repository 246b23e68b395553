package actor

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tether-dev/tether/actor/machine"
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

func dumpOuts(os []machine.Out) string {
	s := "["
	for i, o := range os {
		if i > 0 {
			s += ", "
		}
		switch o := o.(type) {
		case *machine.EntryOut:
			s += fmt.Sprintf("entry{%d %s %q %v}", o.Entry.Seq, o.Entry.Role, o.Entry.Content, o.Entry.Metadata["status"])
		case *machine.BatchOut:
			s += fmt.Sprintf("batch{seqs %v omitted %d}", seqsOf(o.Messages), o.Omitted)
		default:
			s += fmt.Sprintf("%T%+v", o, o)
		}
	}
	return s + "]"
}
