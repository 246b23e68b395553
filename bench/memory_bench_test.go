package bench

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// memSessions is how many idle sessions the memory benchmark connects.
const memSessions = 2000

// BenchmarkSessionMemory measures a real `tether serve` process from
// outside (its RSS in /proc): memSessions connected, idle sessions (each
// with one exchange in its log), then the same sessions once their
// clients left and their actors passivated. The figures are RSS growth
// over the idle node divided by the sessions, after the server ran a few
// GCs (asked through --pprof's heap endpoint with gc=1) and returned what
// they freed. Run with -benchtime 1x.
func BenchmarkSessionMemory(b *testing.B) {
	for range b.N {
		connected, passivated := measureSessions(b)
		b.ReportMetric(connected, "B/connected-session")
		b.ReportMetric(passivated, "B/passivated-session")
	}
}

func measureSessions(b *testing.B) (float64, float64) {
	const pprofAddr = "127.0.0.1:16061"
	srv := startServer(b, "--rate", "0", "--max-sessions-per-user", "-1", "--idle-timeout", "2s", "--pprof", pprofAddr)
	// A few collections, as a node that runs for a while has had: each one
	// may halve the stack of a goroutine that uses little of it.
	gc := func() {
		for range 3 {
			resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?gc=1")
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
		time.Sleep(5 * time.Second) // the runtime returns freed pages to the OS in the background
	}
	tok := tokenFor(b, "bench")
	// Warm up the server's pools with a first round, then measure the base.
	warm := connectIdle(b, srv.url(), tok, 100)
	for _, ws := range warm {
		ws.Close()
	}
	gc()
	base := srv.rss(b)
	conns := connectIdle(b, srv.url(), tok, memSessions)
	gc()
	connected := float64(srv.rss(b)-base) / memSessions
	for _, ws := range conns {
		ws.Close()
	}
	deadline := time.Now().Add(60 * time.Second)
	for srv.metric(b, "tether_sessions_active") > 0 {
		if time.Now().After(deadline) {
			b.Fatal("actors still active 60s after their clients left")
		}
		time.Sleep(200 * time.Millisecond)
	}
	gc()
	passivated := float64(srv.rss(b)-base) / memSessions
	return connected, passivated
}

// connectIdle opens n sessions, each with one exchange, and leaves them
// connected and idle.
func connectIdle(b testing.TB, url, tok string, n int) []*websocket.Conn {
	b.Helper()
	conns := make([]*websocket.Conn, 0, n)
	for range n {
		ws, _, err := hello(url, tok, "", 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fill(ws, 1); err != nil {
			b.Fatal(fmt.Errorf("fill: %w", err))
		}
		conns = append(conns, ws)
	}
	return conns
}
