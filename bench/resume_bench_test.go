package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// BenchmarkResume measures how long a client takes to recover what it
// missed from a real `tether serve` process (the session active, its
// client gone): from the dial to the last missed entry held by the
// client, the history_batch and every history page it needs included.
// Sub-benchmarks for 10, 100 and 1,000 missed entries; reports p50, p99
// and the server's CPU time per recovery.
//
// With TETHER_BENCH_CENTRIFUGO_BIN set (`make bench-resume`), every
// iteration also recovers the same number of entries from a Centrifugo
// process, the yardstick, alternating which goes first: both
// meet the same moments of this noisy machine. Its figures are reported
// beside Tether's (cf-p50-ms, cf-cpu-us) with the ratio of the p50s.
//
// A first sub-benchmark, new, is the yardstick the issue keeps resumes
// under: dial → session frame of a hello that creates a session (Tether
// alone: Centrifugo has no session to create).
func BenchmarkResume(b *testing.B) {
	srv := startServer(b, "--rate", "0", "--max-sessions-per-user", "-1")
	tok := tokenFor(b, "bench")
	var cf *centrifugo
	if bin := os.Getenv("TETHER_BENCH_CENTRIFUGO_BIN"); bin != "" {
		cf = startCentrifugo(b, bin)
	}
	b.Run("new", func(b *testing.B) {
		measureRecovery(b, 0, recovery{name: "", cpu: func() time.Duration { return srv.cpu(b) }, once: func() (int, error) {
			ws, f, err := hello(srv.url(), tok, "", 0)
			if err != nil {
				return 0, err
			}
			ws.Close()
			if f.Type != "session" || f.LastSeq != 0 || f.SessionID == "" {
				return 0, fmt.Errorf("want a new session, got %+v", f)
			}
			return 0, nil
		}})
	})
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
			ours := recovery{name: "", cpu: func() time.Duration { return srv.cpu(b) }, once: func() (int, error) {
				return recoverMissed(srv.url(), tok, s.SessionID, from, last)
			}}
			if cf == nil {
				measureRecovery(b, missed, ours)
				return
			}
			channel := fmt.Sprintf("chat%d", missed)
			epoch, cfLast := cf.fill(b, channel, missed+10)
			cfFrom, ctok := cfLast-uint64(missed), cf.token("bench")
			measureRecovery(b, missed, ours, recovery{name: "cf-", cpu: cf.cpu, once: func() (int, error) {
				return centrifugoRecover(cf.url(), ctok, channel, epoch, cfFrom)
			}})
		})
	}
}

// recovery is one server's way to recover the missed entries; name
// prefixes its metrics.
type recovery struct {
	name string
	cpu  func() time.Duration // the server's CPU time so far
	once func() (int, error)
}

// measureRecovery runs b.N rounds of every recovery (which must each
// return missed entries), the first of a round alternating, and reports
// each one's p50, p99 and server CPU per recovery, and with two the
// ratio of their p50s.
func measureRecovery(b *testing.B, missed int, rs ...recovery) {
	lat := make([][]time.Duration, len(rs))
	cpu := make([]time.Duration, len(rs))
	b.ResetTimer()
	for i := range b.N {
		for k := range rs {
			r := rs[(i+k)%len(rs)]
			c0, start := r.cpu(), time.Now()
			got, err := r.once()
			d := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if got != missed {
				b.Fatalf("%srecovered %d entries, want %d", r.name, got, missed)
			}
			j := (i + k) % len(rs)
			lat[j] = append(lat[j], d)
			cpu[j] += r.cpu() - c0
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(rs))
	for j, r := range rs {
		slices.Sort(lat[j])
		p50[j] = float64(lat[j][len(lat[j])/2].Microseconds()) / 1000
		b.ReportMetric(p50[j], r.name+"p50-ms")
		b.ReportMetric(float64(lat[j][len(lat[j])*99/100].Microseconds())/1000, r.name+"p99-ms")
		b.ReportMetric(float64(cpu[j].Microseconds())/float64(b.N), r.name+"cpu-us")
	}
	if len(rs) == 2 {
		b.ReportMetric(p50[0]/p50[1], "p50-ratio")
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
