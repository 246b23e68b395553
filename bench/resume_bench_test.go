package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
)

// BenchmarkResume50 measures a resume that replays 50 entries: from the
// hello frame leaving the client to the history_batch arriving (the dial
// is not counted). Reports the median and p99.
func BenchmarkResume50(b *testing.B) {
	n := startNode(b, actor.Config{})
	tok := tokenFor(b, "bench")
	ws, s, err := hello(n.url, tok, "", 0)
	if err != nil {
		b.Fatal(err)
	}
	last, err := fill(ws, 60)
	if err != nil {
		b.Fatal(err)
	}
	ws.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ws, resp, err := smallDialer.Dial(n.url, nil)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		b.StartTimer()
		start := time.Now()
		if err := ws.WriteJSON(map[string]any{"type": "hello", "token": tok, "session_id": s.SessionID, "last_seq": last - 50}); err != nil {
			b.Fatal(err)
		}
		sf, err := readFrame(ws)
		if err != nil || sf.Type != "session" {
			b.Fatalf("session frame: %+v %v", sf, err)
		}
		hb, err := readFrame(ws)
		if err != nil || hb.Type != "history_batch" || len(hb.Messages) != 50 {
			b.Fatalf("history_batch: %v, %d messages", err, len(hb.Messages))
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		ws.Close()
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
