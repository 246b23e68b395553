package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// throughputSessions is the workload of the issue that set the target:
// 200 sessions, each keeping one send in flight.
const throughputSessions = 200

// BenchmarkAckThroughput runs that workload against a real `tether serve
// --rate 0` process (echo agent), clients in this process: b.N sends in
// all. It reports acked sends/s, the ack latency, acks per fsync (from
// /metrics), the server's CPU per 1,000 acks and entries per CPU-second
// (from /proc) and the clients' (this process's: they share the two
// cores with the server), the bytes the server allocated per ack (garbage its GC
// must collect: unlike CPU time, this does not vary with the VM's
// load), and one goroutine's raw fsyncs/s on the same disk measured
// in the same run, with the ratio of the two. Run it with a fixed count,
// e.g. -benchtime 300000x (long enough for Pebble to flush and compact).
func BenchmarkAckThroughput(b *testing.B) {
	srv := startServer(b, "--rate", "0")
	raw := rawFsyncRate(b, srv.dir, time.Second)
	conns := make([]*websocket.Conn, throughputSessions)
	for i := range conns {
		ws, _, err := hello(srv.url(), tokenFor(b, fmt.Sprintf("user-%d", i)), "", 0)
		if err != nil {
			b.Fatal(err)
		}
		defer ws.Close()
		if _, err := fill(ws, 1); err != nil { // warm up
			b.Fatal(err)
		}
		conns[i] = ws
	}
	fsyncs0, appends0 := srv.metric(b, "tether_wal_fsyncs_total"), srv.metric(b, "tether_wal_appends_total")
	alloc0 := srv.metric(b, "go_memstats_alloc_bytes_total")
	cpu0, clientCPU0 := srv.cpu(b), processCPU(b)
	var next atomic.Int64
	lats := make([][]time.Duration, len(conns))
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	b.ResetTimer()
	start := time.Now()
	for i, ws := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := sendLoop(ws, i, &next, int64(b.N))
			lats[i] = l
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	cpu, clientCPU := srv.cpu(b)-cpu0, processCPU(b)-clientCPU0
	fsyncs := srv.metric(b, "tether_wal_fsyncs_total") - fsyncs0
	appends := srv.metric(b, "tether_wal_appends_total") - appends0
	alloc := srv.metric(b, "go_memstats_alloc_bytes_total") - alloc0
	all := slices.Concat(lats...)
	slices.Sort(all)
	acks := float64(len(all))
	b.ReportMetric(acks/elapsed.Seconds(), "acks/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(acks/fsyncs, "acks/fsync")
	b.ReportMetric(cpu.Seconds()*1000/(acks/1000), "cpu-ms/1k-acks")
	b.ReportMetric(clientCPU.Seconds()*1000/(acks/1000), "client-cpu-ms/1k-acks")
	b.ReportMetric(appends/cpu.Seconds(), "entries/cpu-s")
	b.ReportMetric(alloc/acks, "heap-B/ack")
	b.ReportMetric(raw, "raw-fsync/s")
	b.ReportMetric(acks/elapsed.Seconds()/raw, "x-raw-fsync")
}

// sendLoop keeps one send in flight on ws until next passes total, and
// returns each send's ack latency.
func sendLoop(ws *websocket.Conn, client int, next *atomic.Int64, total int64) ([]time.Duration, error) {
	var lats []time.Duration
	var buf []byte // one per client, reused: gorilla's ReadMessage allocates per frame
	for k := 0; next.Add(1) <= total; k++ {
		id := fmt.Sprintf("t%d-%d", client, k)
		idField := []byte(`"id":"` + id + `"`) // ids need no escaping
		sent := time.Now()
		msg := fmt.Appendf(nil, `{"type":"send","id":%q,"content":"a message of the throughput benchmark"}`, id)
		if err := ws.WriteMessage(websocket.TextMessage, msg); err != nil {
			return lats, err
		}
		for {
			_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
			data, err := readInto(ws, buf[:0])
			if err != nil {
				return lats, err
			}
			buf = data
			// The frames are told apart by their bytes, not decoded, so
			// that the clients, which share the two cores with the
			// server, spend less of them: an ack carries its type and
			// the send's id (a JSON string cannot hold these bytes
			// unescaped; a message's metadata holds the id but not the
			// type).
			if bytes.Contains(data, []byte(`"type":"error"`)) {
				return lats, fmt.Errorf("server error: %s", data)
			}
			if bytes.Contains(data, []byte(`"type":"ack"`)) && bytes.Contains(data, idField) {
				lats = append(lats, time.Since(sent))
				break
			}
		}
	}
	return lats, nil
}

// readInto reads the next message into buf, growing it as needed.
func readInto(ws *websocket.Conn, buf []byte) ([]byte, error) {
	_, r, err := ws.NextReader()
	if err != nil {
		return nil, err
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
