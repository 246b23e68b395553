package bench

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// BenchmarkResume measures how long a client takes to recover what it
// missed from a real `tether serve` process (the session active, its
// client gone): from the dial to the last missed entry held by the
// client, the history_batch and every history page it needs included.
// Sub-benchmarks for 10, 100 and 1,000 missed entries; reports p50 and p99.
func BenchmarkResume(b *testing.B) {
	srv := startServer(b, "--rate", "0")
	tok := tokenFor(b, "bench")
	for _, missed := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("missed=%d", missed), func(b *testing.B) {
			ws, s, err := hello(srv.url(), tok, "", 0)
			if err != nil {
				b.Fatal(err)
			}
			last, err := fill(ws, missed/2+5) // echo: two entries per send
			if err != nil {
				b.Fatal(err)
			}
			ws.Close()
			from := last - uint64(missed)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				got, err := recoverMissed(srv.url(), tok, s.SessionID, from, last)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				if got != missed {
					b.Fatalf("recovered %d entries, want %d", got, missed)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// recoverMissed dials, resumes from seq from and pages history until it
// holds every entry up to last; it returns how many it got. It pages the
// way a client that knows the range it lacks can: all pages asked at once.
func recoverMissed(url, tok, sid string, from, last uint64) (int, error) {
	ws, resp, err := smallDialer.Dial(url, nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	defer ws.Close()
	if err := ws.WriteJSON(map[string]any{"type": "hello", "token": tok, "session_id": sid, "last_seq": from}); err != nil {
		return 0, err
	}
	if f, err := readFrame(ws); err != nil || f.Type != "session" {
		return 0, fmt.Errorf("session frame: %+v %v", f, err)
	}
	b, err := readBatch(ws)
	if err != nil {
		return 0, err
	}
	// The batch says where the omitted entries start and end: ask for
	// every page at once (200 entries each, the server's cap), so their
	// round trips overlap, then read the answers.
	got, pages := len(b.Messages), 0
	for lo := b.FirstSeq; lo > from+1; lo -= min(200, lo-from-1) {
		if err := ws.WriteJSON(map[string]any{"type": "history", "before_seq": lo, "limit": min(200, lo-from-1)}); err != nil {
			return 0, err
		}
		pages++
	}
	for range pages {
		p, err := readBatch(ws)
		if err != nil {
			return 0, err
		}
		got += len(p.Messages)
	}
	if b.LastSeq != last && last > from {
		return got, fmt.Errorf("batch ends at %d, want %d", b.LastSeq, last)
	}
	return got, nil
}

type batchFrame struct {
	Type     string            `json:"type"`
	Messages []json.RawMessage `json:"messages"`
	FirstSeq uint64            `json:"first_seq"`
	LastSeq  uint64            `json:"last_seq"`
}

func readBatch(ws *websocket.Conn) (batchFrame, error) {
	var b batchFrame
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := ws.ReadMessage()
	if err != nil {
		return b, err
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, err
	}
	if b.Type != "history_batch" {
		return b, fmt.Errorf("want history_batch, got %s", data)
	}
	return b, nil
}
