package bench

import (
	"runtime"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
)

const memSessions = 1000

// BenchmarkSessionMemory measures the memory of memSessions connected,
// idle sessions (each with a few entries), then of the same sessions once
// their clients left and their actors passivated. Heap and goroutine
// stacks are counted. Client and server share the process, so the
// connected figure includes the benchmark client's own socket state: it
// is an upper bound for the server. Run with -benchtime 1x.
func BenchmarkSessionMemory(b *testing.B) {
	for range b.N {
		connected, passivated := measureSessions(b)
		b.ReportMetric(connected, "B/connected-session")
		b.ReportMetric(passivated, "B/passivated-session")
	}
}

func measureSessions(b *testing.B) (float64, float64) {
	n := startNode(b, actor.Config{IdleTimeout: 50 * time.Millisecond})
	tok := tokenFor(b, "bench")
	base := inUse()
	conns := make([]*websocket.Conn, 0, memSessions)
	for range memSessions {
		ws, _, err := hello(n.url, tok, "", 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fill(ws, 2); err != nil {
			b.Fatal(err)
		}
		conns = append(conns, ws)
	}
	connected := float64(inUse()-base) / memSessions
	for _, ws := range conns {
		ws.Close()
	}
	conns = nil
	deadline := time.Now().Add(30 * time.Second)
	for n.reg.Stats().Active > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("%d actors still active", n.reg.Stats().Active)
		}
		time.Sleep(20 * time.Millisecond)
	}
	passivated := float64(inUse()-base) / memSessions
	return connected, passivated
}

// inUse is live heap plus goroutine stacks after a full collection.
func inUse() int64 {
	var m runtime.MemStats
	for range 2 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}
