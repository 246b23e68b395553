package bench

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/cluster"
)

const (
	// scalePerChild bounds the idle sessions of one child process, far
	// below the 20,000 files a process may hold here, and its storm's
	// 2 × 4,000 ports far below one source address's ~28,000.
	scalePerChild = 4000
	// scaleActive sessions each send scaleActiveSends messages one after
	// the other, for the latency figures.
	scaleActive      = 20
	scaleActiveSends = 200
)

// BenchmarkScale runs a real `tether serve --rate 0
// --max-sessions-per-user -1` process with TETHER_SCALE_SESSIONS idle
// sessions (default 5,000) held by child processes of this test binary
// (at most 4,000 each, each from a loopback address of its own: see
// scale_client_test.go). Each idle session has one exchange in its log
// and stays connected, answering the server's pings. It reports:
//
//   - B/idle-session-rss: the server's RSS (from /proc) once the idle
//     sessions are connected and hibernated, the server returned what
//     that freed (--memory-return) and has been quiet for a few seconds, minus its RSS when warmed up and quiet before them, per
//     session, with no forced GC: what a node that runs normally holds;
//   - B/idle-session-rss-gc: the same, both readings taken after forcing
//     three GCs through --pprof's heap endpoint (?gc=1) and leaving the
//     runtime 5 s to return the freed pages, as BenchmarkSessionMemory
//     does;
//   - sessions/s-open: idle sessions opened per second (hello, one send
//     acknowledged and replied to), all children opening 32 at a time,
//     from the parent's "open" to the last child's "ready";
//   - s-storm: every idle client drops its connection (no close frame)
//     and resumes its session at once, every child told at the same
//     time; seconds until the last session frame, the slowest child's.
//     A session not resumed with reason "resumed" fails the benchmark.
//     SYNs that find the server's listen queue (net.core.somaxconn) full
//     are sent again by the kernel a second or more later, which counts
//     here: the log line gives the machine's listen-queue overflows;
//   - ms-p99-active, ms-p99-active-idle: p99 of send → ack for 20 active
//     sessions in this process, each sending 200 messages one after the
//     other, measured before the idle sessions connect and again while
//     they are connected (same server, same run), and x-p99-idle, the
//     second over the first.
//
// TETHER_SCALE_HEAP=path saves the server's heap profile (and its
// goroutines' beside it) when the idle sessions are measured, before the
// forced GC; TETHER_SCALE_STORM_PROFILE=path its CPU profile of the
// storm's first 5 s, and its goroutines 2 s in. TETHER_SCALE_AWAKE=1
// runs the server with hibernation and memory return off
// (--hibernate-after 0 --memory-return 0), the figures to compare with.
// Run it once:
//
//	TETHER_SCALE_SESSIONS=18000 go test -run '^$' -bench 'BenchmarkScale$' -benchtime 1x -timeout 30m ./bench/
func BenchmarkScale(b *testing.B) {
	n := 5000
	if v := os.Getenv("TETHER_SCALE_SESSIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("TETHER_SCALE_SESSIONS=%q: want a count ≥ 1", v)
		}
	}
	for range b.N {
		r := measureScale(b, n)
		b.ReportMetric(r.rss, "B/idle-session-rss")
		b.ReportMetric(r.rssGC, "B/idle-session-rss-gc")
		b.ReportMetric(r.openRate, "sessions/s-open")
		b.ReportMetric(r.storm.Seconds(), "s-storm")
		b.ReportMetric(millis(r.p99), "ms-p99-active")
		b.ReportMetric(millis(r.p99Idle), "ms-p99-active-idle")
		b.ReportMetric(float64(r.p99Idle)/float64(r.p99), "x-p99-idle")
	}
}

type scaleResult struct {
	rss, rssGC    float64 // bytes per idle session
	openRate      float64 // sessions per second
	storm         time.Duration
	p99, p99Idle  time.Duration
	p50, p50Idle  time.Duration
	base, baseGC  int64
	full, fullGC  int64
	open, stormTo time.Duration
	// listen queue overflows during the open and the storm
	openOverflows, stormOverflows int64
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func measureScale(b *testing.B, n int) scaleResult {
	pprofAddr, err := cluster.FreeLocalAddr(false)
	if err != nil {
		b.Fatal(err)
	}
	// --idle-timeout 1h: no session leaves memory during the run, so the
	// warm-up's and the active rounds' sessions weigh the same in every
	// reading.
	flags := []string{"--rate", "0", "--max-sessions-per-user", "-1", "--idle-timeout", "1h", "--pprof", pprofAddr}
	awake := os.Getenv("TETHER_SCALE_AWAKE") == "1"
	if awake {
		flags = append(flags, "--hibernate-after", "0", "--memory-return", "0")
	}
	srv := startServer(b, flags...)
	var r scaleResult

	// Warm up the server's pools, and measure the active sessions alone.
	for _, ws := range connectIdle(b, srv.url(), tokenFor(b, "scale-warm"), 100) {
		ws.Close()
	}
	r.p50, r.p99 = activeLatency(b, srv)
	if err := waitMetric(b, srv, "tether_connections", 0, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	waitQuiet(b, srv)
	r.base = srv.rss(b)
	forceGC(b, pprofAddr)
	r.baseGC = srv.rss(b)

	fleet, err := startScaleFleet(b, srv.url(), n, scalePerChild)
	if err != nil {
		b.Fatal(err)
	}
	overflows := listenOverflows()
	if r.open, err = fleet.open(time.Minute + time.Duration(n)*10*time.Millisecond); err != nil {
		b.Fatal(err)
	}
	r.openRate = float64(n) / r.open.Seconds()
	r.openOverflows = listenOverflows() - overflows
	if err := waitMetric(b, srv, "tether_connections", float64(n), time.Minute); err != nil {
		b.Fatal(err)
	}
	if !awake {
		// Quiet sessions hibernate (--hibernate-after, 10 s by default):
		// an idle session is measured as a node that runs normally holds it.
		returns := srv.metric(b, "tether_memory_returns_total")
		if err := waitMetric(b, srv, "tether_sessions_asleep", float64(n), 2*time.Minute); err != nil {
			b.Fatal(err)
		}
		// And the node gives what they freed back to the OS
		// (--memory-return, every 10 s by default, after such a wave): wait
		// for it, as a node that runs for a while has had it.
		if err := waitMetricAbove(b, srv, "tether_memory_returns_total", returns, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	waitQuiet(b, srv)
	r.full = srv.rss(b)
	if path := os.Getenv("TETHER_SCALE_HEAP"); path != "" {
		saveProfile(b, pprofAddr, "heap", path)
		saveProfile(b, pprofAddr, "goroutine", path+".goroutines")
		saveProfile(b, pprofAddr, "heap?debug=1", path+".txt")
	}
	forceGC(b, pprofAddr)
	r.fullGC = srv.rss(b)
	if path := os.Getenv("TETHER_SCALE_HEAP"); path != "" {
		saveProfile(b, pprofAddr, "heap", path+".gc")
		saveProfile(b, pprofAddr, "heap?debug=1", path+".gc.txt")
	}
	r.rss = float64(r.full-r.base) / float64(n)
	r.rssGC = float64(r.fullGC-r.baseGC) / float64(n)

	r.p50Idle, r.p99Idle = activeLatency(b, srv)
	opened := srv.metric(b, "tether_connections_opened_total")
	overflows = listenOverflows()
	var profiled sync.WaitGroup
	if path := os.Getenv("TETHER_SCALE_STORM_PROFILE"); path != "" {
		profiled.Add(1)
		go func() {
			defer profiled.Done()
			saveProfile(b, pprofAddr, "profile?seconds=5", path)
		}()
		profiled.Add(1)
		go func() {
			defer profiled.Done()
			time.Sleep(2 * time.Second)
			saveProfile(b, pprofAddr, "goroutine?debug=1", path+".goroutines.txt")
		}()
		time.Sleep(100 * time.Millisecond) // the profile has started
	}
	cpu0 := srv.cpu(b)
	clients0, err := fleet.cpu()
	if err != nil {
		b.Fatal(err)
	}
	busy0, all0 := machineBusy()
	start := time.Now()
	if r.storm, err = fleet.storm(5 * time.Minute); err != nil {
		b.Fatal(err)
	}
	cpu1 := srv.cpu(b)
	clients1, err := fleet.cpu()
	if err != nil {
		b.Fatal(err)
	}
	busy1, all1 := machineBusy()
	profiled.Wait()
	r.stormTo = time.Since(start)
	r.stormOverflows = listenOverflows() - overflows
	if err := waitMetric(b, srv, "tether_connections", float64(n), time.Minute); err != nil {
		b.Fatal(fmt.Errorf("after the storm: %w", err))
	}
	if got := srv.metric(b, "tether_connections_opened_total") - opened; got != float64(n) {
		b.Fatalf("the storm opened %.0f connections, want %d", got, n)
	}
	b.Logf("%d idle sessions in %d processes; server RSS %.1f → %.1f MiB (forced GC: %.1f → %.1f MiB); open %v; storm %v (parent's wall %v); active p50 %v → %v, p99 %v → %v",
		n, len(fleet.children), mib(r.base), mib(r.full), mib(r.baseGC), mib(r.fullGC), r.open.Round(time.Millisecond),
		r.storm, r.stormTo.Round(time.Millisecond), r.p50, r.p50Idle, r.p99, r.p99Idle)
	// A storm's SYNs that find the listen queue full (its length is
	// net.core.somaxconn) are dropped and sent again by the kernel 1 s,
	// 3 s, … later: that delay is part of s-storm. The counter is the
	// machine's, so another program's overflows would count too.
	// Whether the storm waits or computes: the server's CPU over the
	// storm, the client processes', and how busy the machine's cores
	// were. The clients share the server's cores: their CPU divided by
	// the cores is a storm time no server could beat on this machine.
	b.Logf("during the storm: server CPU %v, client processes' CPU %v (%v per core), machine cores busy %.0f%%",
		(cpu1 - cpu0).Round(time.Millisecond), (clients1 - clients0).Round(time.Millisecond),
		((clients1 - clients0) / time.Duration(runtime.NumCPU())).Round(time.Millisecond),
		100*float64(busy1-busy0)/float64(max(all1-all0, 1)))
	b.Logf("listen queue overflows (TcpExt ListenOverflows) during the open: %d, during the storm: %d", r.openOverflows, r.stormOverflows)
	if killed := fleet.close(); killed > 0 {
		b.Errorf("%d client processes did not exit when their stdin closed", killed)
	}
	return r
}

// machineBusy is the machine's busy and total CPU time so far (in
// /proc/stat's ticks: everything but idle and iowait is busy), or zeros
// if unknown.
func machineBusy() (busy, all int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0
		}
		all += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, all
}

// listenOverflows is the machine's count of connections dropped because
// a listen queue was full (TcpExt ListenOverflows), or -1 if unknown.
func listenOverflows() int64 {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return -1
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "TcpExt:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "ListenOverflows" && i < len(f) {
				v, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil {
					return -1
				}
				return v
			}
		}
	}
	return -1
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// activeLatency opens scaleActive sessions, has each send
// scaleActiveSends messages one after the other, closes them, and
// returns the p50 and p99 of send → ack over all the sends.
func activeLatency(tb testing.TB, srv *server) (time.Duration, time.Duration) {
	tb.Helper()
	conns := connectIdle(tb, srv.url(), tokenFor(tb, "scale-active"), scaleActive)
	defer func() {
		for _, ws := range conns {
			ws.Close()
		}
	}()
	lats := make([][]time.Duration, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, ws := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var next atomic.Int64
			lats[i], errs[i] = sendLoop(ws, i, &next, scaleActiveSends)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	return all[len(all)/2], all[len(all)*99/100]
}

// waitMetric waits until the server's gauge or counter name equals want.
func waitMetric(tb testing.TB, srv *server, name string, want float64, timeout time.Duration) error {
	tb.Helper()
	return waitMetricTo(tb, srv, name, timeout, func(v float64) bool { return v == want }, fmt.Sprintf("want %v", want))
}

// waitMetricTo waits until ok holds for the server's metric name.
func waitMetricTo(tb testing.TB, srv *server, name string, timeout time.Duration, ok func(float64) bool, want string) error {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := srv.metric(tb, name)
		if ok(got) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is %v after %v, %s", name, got, timeout, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitQuiet waits until the server has used less than 5% of a core for
// 3 s in a row (Pebble's flushes, the GC and the scheduler settled), or
// 2 minutes; then the benchmark measures anyway, and says so.
func waitQuiet(tb testing.TB, srv *server) {
	tb.Helper()
	const step, quiet, limit = 500 * time.Millisecond, 3 * time.Second, 2 * time.Minute
	start := time.Now()
	since, prev := start, srv.cpu(tb)
	for time.Since(since) < quiet {
		if time.Since(start) > limit {
			tb.Logf("the server was not quiet within %v; measuring anyway", limit)
			return
		}
		time.Sleep(step)
		cpu := srv.cpu(tb)
		if cpu-prev > step/20 {
			since = time.Now()
		}
		prev = cpu
	}
}

// forceGC has the server run three GCs, as a node that runs for a while
// has had (each may halve the stack of a goroutine that uses little of
// it), and waits while the runtime returns the freed pages to the OS in
// the background.
func forceGC(tb testing.TB, pprofAddr string) {
	tb.Helper()
	for range 3 {
		resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?gc=1")
		if err != nil {
			tb.Fatal(err)
		}
		resp.Body.Close()
	}
	time.Sleep(5 * time.Second)
}

// TestScaleHarness runs BenchmarkScale's harness small: two client
// processes of 40 idle sessions each and one storm, and checks what the
// benchmark relies on: each child opens all its sessions, the server
// counts them connected, the storm resumes every one of them with
// reason "resumed" (each through a new connection), and the children
// exit by themselves once their stdin closes.
func TestScaleHarness(t *testing.T) {
	const children, each = 2, 40
	srv := startServer(t, "--rate", "0", "--max-sessions-per-user", "-1")
	fleet, err := startScaleFleet(t, srv.url(), children*each, each)
	if err != nil {
		t.Fatal(err)
	}
	if len(fleet.children) != children {
		t.Fatalf("%d child processes, want %d", len(fleet.children), children)
	}
	for i, ch := range fleet.children {
		if want := fmt.Sprintf("127.0.0.%d", 2+i); ch.src != want || ch.sessions != each {
			t.Fatalf("child %d: %d sessions from %s, want %d from %s", i, ch.sessions, ch.src, each, want)
		}
	}
	if _, err := fleet.open(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitMetric(t, srv, "tether_connections", children*each, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	opened := srv.metric(t, "tether_connections_opened_total")
	if _, err := fleet.storm(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The dropped connections are gone and the resumed ones are there.
	if err := waitMetric(t, srv, "tether_connections", children*each, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := srv.metric(t, "tether_connections_opened_total") - opened; got != children*each {
		t.Errorf("the storm opened %.0f connections, want %d", got, children*each)
	}
	if killed := fleet.close(); killed > 0 {
		t.Errorf("%d client processes did not exit when their stdin closed", killed)
	}
	for _, ch := range fleet.children {
		if ps := ch.cmd.ProcessState; ps == nil || !ps.Exited() || ps.ExitCode() != 0 {
			t.Errorf("child %s: not exited: %v", ch.src, ch.cmd.ProcessState)
		}
	}
}

// saveProfile writes the server's pprof profile name to path.
func saveProfile(tb testing.TB, pprofAddr, name, path string) {
	tb.Helper()
	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		tb.Fatal(err)
	}
}

// waitMetricAbove waits until the server's metric name is above v.
func waitMetricAbove(tb testing.TB, srv *server, name string, v float64, timeout time.Duration) error {
	tb.Helper()
	return waitMetricTo(tb, srv, name, timeout, func(got float64) bool { return got > v }, fmt.Sprintf("want above %v", v))
}
