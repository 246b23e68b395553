package bench

// Cluster benchmarks (numbers for the README's performance table):
//
//	go test ./bench -run '^$' -bench BenchmarkClusterResume -benchtime 2000x
//	go test ./bench -run '^$' -bench BenchmarkClusterAckThroughput -benchtime 40000x
//	go test ./bench -run '^$' -bench BenchmarkClusterKillToResume -benchtime 5x
//	TETHER_BENCH_GOSSIP_TIMING=lan go test ./bench -run '^$' -bench BenchmarkClusterKillToResume -benchtime 5x
//	go test ./bench -run '^$' -bench BenchmarkClusterConfigCommit -benchtime 10x

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/gateway"
	tnode "github.com/tether-dev/tether/gateway/node"
)

// startClusterNode starts one in-process node joining seeds.
func startClusterNode(b *testing.B, id, dir string, seeds []string, r int) *tnode.Node {
	b.Helper()
	nd, err := tnode.New(tnode.Config{
		Dir: dir, NodeID: id, Logger: slog.New(slog.DiscardHandler),
		Gateway: gateway.Config{Secret: secret, NoRateLimit: true},
		Cluster: &cluster.Config{Gossip: "127.0.0.1:0", Seeds: seeds, Timing: cluster.TestTiming(), Replicas: r},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = nd.Close() })
	return nd
}

// waitCommitted waits until every node's committed configuration has n
// members.
func waitCommitted(b *testing.B, n int, nodes ...*tnode.Node) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, nd := range nodes {
		for nd.Cluster.Stats().Members != n {
			if time.Now().After(deadline) {
				b.Fatalf("%s sees %d members, want %d", nd.ID, nd.Cluster.Stats().Members, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// startClusterNodes starts n in-process nodes in one cluster (the fast
// gossip timings, --replicas r) and waits until each sees all of them.
func startClusterNodes(b *testing.B, n, r int) []*tnode.Node {
	b.Helper()
	var nodes []*tnode.Node
	for i := range n {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].Cluster.GossipAddr()}
		}
		nodes = append(nodes, startClusterNode(b, fmt.Sprintf("node-%d", i), b.TempDir(), seeds, r))
	}
	waitCommitted(b, n, nodes...)
	return nodes
}

// BenchmarkClusterConfigCommit measures configuration changes on three
// in-process nodes (--replicas 2, the test gossip timing): a fourth node
// joins (from its start to every node applying the committed
// configuration that names it) and leaves gracefully (from its Close to
// every survivor applying the one without it). Each iteration does one
// of each. It reports the medians of both and the leader's Raft commit
// of a configuration (the tether_cluster_raft_commit_seconds metric).
func BenchmarkClusterConfigCommit(b *testing.B) {
	nodes := startClusterNodes(b, 3, 2)
	seeds := []string{nodes[0].Cluster.GossipAddr()}
	var joins, leaves, commits []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		nd := startClusterNode(b, fmt.Sprintf("joiner-%d-%d", b.N, i), b.TempDir(), seeds, 2)
		waitCommitted(b, 4, append(nodes, nd)...)
		joins = append(joins, time.Since(start))
		for _, n := range nodes {
			if st := n.Cluster.Stats().Raft; st.IsLeader {
				commits = append(commits, st.CommitLatency)
			}
		}
		start = time.Now()
		if err := nd.Close(); err != nil {
			b.Fatalf("leave %d: %v", i, err)
		}
		waitCommitted(b, 3, nodes...)
		leaves = append(leaves, time.Since(start))
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(joins), "join-ms")
	b.ReportMetric(median(leaves), "leave-ms")
	if len(commits) > 0 {
		b.ReportMetric(median(commits), "raft-commit-ms")
	}
}

// BenchmarkClusterResume compares a resume that replays 50 entries
// through the session's owner (local) with one through another node
// (forwarded over the node link), in a 3-node in-process cluster with
// --replicas 2: from the hello leaving the client to the history_batch
// arriving, as BenchmarkResume50 measures it on one node. Each iteration
// does one of each, alternately first. Reports both medians, p99s and
// the ratio of the medians (target ≤ 1.5).
func BenchmarkClusterResume(b *testing.B) {
	nodes := startClusterNodes(b, 3, 2)
	tok := tokenFor(b, "bench")
	ws, s, err := hello(nodes[0].URL(), tok, "", 0)
	if err != nil {
		b.Fatal(err)
	}
	last, err := fill(ws, 60)
	if err != nil {
		b.Fatal(err)
	}
	ws.Close()
	var local, forwarded string
	for _, nd := range nodes {
		if nd.Cluster.Owns(s.SessionID) {
			local = nd.URL()
		} else {
			forwarded = nd.URL()
		}
	}
	resume := func(url string) time.Duration {
		ws, resp, err := smallDialer.Dial(url, nil)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		defer ws.Close()
		start := time.Now()
		if err := ws.WriteJSON(map[string]any{"type": "hello", "token": tok, "session_id": s.SessionID, "last_seq": last - 50}); err != nil {
			b.Fatal(err)
		}
		if sf, err := readFrame(ws); err != nil || sf.Type != "session" {
			b.Fatalf("session frame: %+v %v", sf, err)
		}
		if hb, err := readFrame(ws); err != nil || hb.Type != "history_batch" || len(hb.Messages) != 50 {
			b.Fatalf("history_batch: %v, %d messages", err, len(hb.Messages))
		}
		return time.Since(start)
	}
	var ll, fl []time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			ll = append(ll, resume(local))
			fl = append(fl, resume(forwarded))
		} else {
			fl = append(fl, resume(forwarded))
			ll = append(ll, resume(local))
		}
	}
	b.StopTimer()
	slices.Sort(ll)
	slices.Sort(fl)
	p := func(l []time.Duration, q int) float64 { return float64(l[len(l)*q/100].Microseconds()) }
	b.ReportMetric(p(ll, 50), "local-p50-µs")
	b.ReportMetric(p(fl, 50), "forwarded-p50-µs")
	b.ReportMetric(p(ll, 99), "local-p99-µs")
	b.ReportMetric(p(fl, 99), "forwarded-p99-µs")
	b.ReportMetric(p(fl, 50)/p(ll, 50), "forwarded/local-p50")
}

// BenchmarkClusterAckThroughput runs BenchmarkAckThroughput's workload
// (200 sessions, each keeping one send in flight, echo agent, b.N sends
// in all) against one `tether serve` process and against three that
// form a cluster with --replicas 2, the clients spread evenly over the
// nodes (so two in three are forwarded). Reports acked sends/s, the ack
// latency and the servers' CPU time per 1,000 acks (all nodes together). Run it with a fixed count, e.g. -benchtime 40000x.
func BenchmarkClusterAckThroughput(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			l, err := NewLocal(context.Background(), LocalConfig{
				N: n, Bin: serverBin(b), Dir: b.TempDir(), JWTSecret: string(secret), Agent: "echo",
				Extra: []string{"--rate", "0", "--max-turns", "1000", "--replicas", "2", "--gossip-timing", "test"},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			waitMembers(b, l, n)
			urls := l.URLs()
			conns := make([]*websocket.Conn, throughputSessions)
			for i := range conns {
				ws, _, err := hello(urls[i%n], tokenFor(b, fmt.Sprintf("user-%d", i)), "", 0)
				if err != nil {
					b.Fatal(err)
				}
				defer ws.Close()
				if _, err := fill(ws, 1); err != nil {
					b.Fatal(err)
				}
				conns[i] = ws
			}
			l.Sample(time.Now())
			cpu0 := cpuSeconds(l)
			var next atomic.Int64
			lats := make([][]time.Duration, len(conns))
			errs := make(chan error, len(conns))
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for i, ws := range conns {
				wg.Go(func() {
					l, err := sendLoop(ws, i, &next, int64(b.N))
					lats[i] = l
					if err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			l.Sample(time.Now())
			cpu := cpuSeconds(l) - cpu0
			all := slices.Concat(lats...)
			slices.Sort(all)
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "acks/s")
			b.ReportMetric(cpu*1000/(float64(len(all))/1000), "server-cpu-ms/1k-acks")
			b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkClusterKillToResume measures, on three `tether serve`
// processes with --replicas 2, the time from SIGKILL of a session's owner
// to the first successful resume of that session through another node
// (a client retrying every 50 ms). Each iteration kills one node and
// restarts it after. The gossip timings are --gossip-timing test (a dead
// node noticed in about a second) unless TETHER_BENCH_GOSSIP_TIMING names
// another preset (lan: the default of `tether serve`).
func BenchmarkClusterKillToResume(b *testing.B) {
	timing := os.Getenv("TETHER_BENCH_GOSSIP_TIMING")
	if timing == "" {
		timing = "test"
	}
	l, err := NewLocal(context.Background(), LocalConfig{
		N: 3, Bin: serverBin(b), Dir: b.TempDir(), JWTSecret: string(secret), Agent: "echo",
		Extra: []string{"--replicas", "2", "--gossip-timing", timing},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	waitMembers(b, l, 3)
	names := []string{l.Name(0), l.Name(1), l.Name(2)}
	place := cluster.NewPlacement(names, cluster.PlacementConfig{})
	urls := l.URLs()
	tok := tokenFor(b, "bench")
	var took []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		victim := i % 3
		other := urls[(victim+1)%3]
		var sid string
		var last uint64
		for sid == "" || place.Owner(sid) != names[victim] { // a session the victim owns
			ws, s, err := hello(other, tok, "", 0)
			if err != nil {
				b.Fatal(err)
			}
			if last, err = fill(ws, 2); err != nil {
				b.Fatal(err)
			}
			ws.Close()
			sid = s.SessionID
		}
		b.StartTimer()
		if err := l.Signal(victim, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		killed := time.Now()
		for {
			ws, f, err := hello(other, tok, sid, last)
			if err == nil && f.Type == "session" {
				ws.Close()
				break
			}
			if ws != nil {
				ws.Close()
			}
			if time.Since(killed) > 2*time.Minute {
				b.Fatalf("no resume of %s within 2 minutes of the kill: %v", sid, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		took = append(took, time.Since(killed))
		b.StopTimer()
		if err := l.Start(context.Background(), victim); err != nil {
			b.Fatal(err)
		}
		waitMembers(b, l, 3)
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "max-ms")
}

// cpuSeconds is the CPU time the nodes of l have used (as of the last
// Sample).
func cpuSeconds(l *Local) float64 {
	total := 0.0
	for _, st := range l.Stats() {
		total += st.CPUSeconds
	}
	return total
}

// waitMembers waits until each node of l counts n members.
func waitMembers(b *testing.B, l *Local, n int) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for _, u := range l.URLs() {
		addr := strings.TrimSuffix(strings.TrimPrefix(u, "ws://"), "/v1/ws")
		for members(addr) != n {
			if time.Now().After(deadline) {
				b.Fatalf("%s does not see %d members", addr, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// members is the tether_cluster_members gauge of the node at addr (-1
// when it cannot be read; 1 for a node outside any cluster).
func members(addr string) int {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var buf strings.Builder
	if _, err := io.Copy(&buf, resp.Body); err != nil {
		return -1
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "tether_cluster_members "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f)
		}
	}
	return 1
}
