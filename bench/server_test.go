package bench

// A real `tether serve` process (the harness's Local, one node) for the
// benchmarks that measure the server from outside: its CPU and RSS from
// /proc, its counters from /metrics, with the clients in the benchmark
// process.

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

type server struct {
	local *Local
	addr  string // host:port
	dir   string
}

// startServer runs one node with the bench secret and extra flags.
// TETHER_BENCH_SERVER_FLAGS adds more, e.g. "--pprof 127.0.0.1:6060" to
// profile the server under a benchmark's load.
func startServer(tb testing.TB, extra ...string) *server {
	tb.Helper()
	dir := tb.TempDir()
	extra = append(extra, strings.Fields(os.Getenv("TETHER_BENCH_SERVER_FLAGS"))...)
	// TETHER_BENCH_SERVER_BIN runs another tether binary (an older
	// version, for before/after figures) instead of this tree's.
	bin := os.Getenv("TETHER_BENCH_SERVER_BIN")
	if bin == "" {
		bin = serverBin(tb)
	}
	l, err := NewLocal(context.Background(), LocalConfig{
		N: 1, Bin: bin, Dir: dir, JWTSecret: string(secret), Agent: "echo", Extra: extra,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	addr := strings.TrimSuffix(strings.TrimPrefix(l.URLs()[0], "ws://"), "/v1/ws")
	return &server{local: l, addr: addr, dir: dir}
}

func (s *server) url() string { return "ws://" + s.addr + "/v1/ws" }

// cpu is the server's user+system CPU time so far.
func (s *server) cpu(testing.TB) time.Duration {
	s.local.Sample(time.Now())
	return time.Duration(s.local.Stats()[0].CPUSeconds * float64(time.Second))
}

// rss is the server's resident set size in bytes.
func (s *server) rss(testing.TB) int64 {
	rss, _ := s.local.Sample(time.Now())
	return rss
}

// metric reads one unlabelled counter or gauge from /metrics.
func (s *server) metric(tb testing.TB, name string) float64 {
	tb.Helper()
	resp, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return f
		}
	}
	tb.Fatalf("metric %s not found", name)
	return 0
}

// rawFsyncRate is how many 256-byte append+fsync rounds one goroutine
// does per second in dir's file system, measured for d.
func rawFsyncRate(tb testing.TB, dir string, d time.Duration) float64 {
	tb.Helper()
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := bytes.Repeat([]byte("x"), 256)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if _, err := f.Write(buf); err != nil {
			tb.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			tb.Fatal(err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}
