package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-dev/tether/bench/netns"
	"github.com/tether-dev/tether/cluster"
)

// LocalConfig configures the local nodes `--local N` starts.
type LocalConfig struct {
	N   int    // nodes, ≥ 1
	Bin string // the tether binary
	// Dir holds each node's data directory and log file (node-I/,
	// node-I.log).
	Dir       string
	JWTSecret string
	Window    time.Duration // --window; 0: the server's default
	Agent     string        // --agent
	// AgentURL and AgentSecret: with Agent http, the --agent-url and the
	// TETHER_AGENT_SECRET (in the environment: a flag shows in ps).
	AgentURL, AgentSecret string
	ToolDelay             time.Duration // --demo-search-delay, with the demo engine
	Extra                 []string      // more serve flags, for every node
	// StartTimeout bounds one start (until `listening` is logged and
	// /readyz answers 200). Default 30s.
	StartTimeout time.Duration
	// Lab, if set, runs node i inside the lab's namespace i, on the lab's
	// addresses (so that --partition-every can cut their links for real);
	// the harness reaches each node from inside its namespace (DialContext).
	// The nodes then need a cluster secret: gossip is not on loopback.
	Lab *netns.Lab
}

// Ports of a node in a lab: every node has an address of its own.
const (
	labHTTPPort   = 8080
	labGossipPort = 7946
)

// localNode is one `tether serve` process, restarted on the same
// addresses and data directory.
type localNode struct {
	name, listen, gossip, data, logPath string
	args                                []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current process has exited
	starts   int
	cpuDone  float64 // CPU seconds of the processes that have exited
	cpuLast  float64 // CPU seconds of the current process, last sample
	rssPeak  int64
	rssLast  int64
	lastPID  int
	lastTick time.Time
	lastCPU  float64
}

// Local runs N local nodes.
type Local struct {
	cfg   LocalConfig
	nodes []*localNode
	// forks runs each node's fork on one OS thread that lives as long as
	// the Local: Pdeathsig fires when the thread that forked the child
	// exits, and the lab's dials end the threads they lock (netns), which
	// may be any thread a plain Start ran on.
	forks    chan func()
	forksEnd sync.Once
}

// NewLocal picks free addresses for cfg.N nodes and starts them, the
// first with no --join and the others joining the first's gossip
// address. It returns when every node is ready.
func NewLocal(ctx context.Context, cfg LocalConfig) (*Local, error) {
	if cfg.N < 1 {
		return nil, errors.New("bench: --local needs at least 1 node")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: node directory: %w", err)
	}
	if cfg.Lab != nil && cfg.Lab.Nodes() < cfg.N {
		return nil, fmt.Errorf("bench: the lab has %d namespaces for %d nodes", cfg.Lab.Nodes(), cfg.N)
	}
	l := &Local{cfg: cfg, forks: make(chan func())}
	go l.forker()
	var key [16]byte
	_, _ = rand.Read(key[:])
	secret := hex.EncodeToString(key[:]) // one for all nodes
	for i := range cfg.N {
		listen, gossip, err := l.addrs(i)
		if err != nil {
			_ = l.Close()
			return nil, err
		}
		n := &localNode{
			name: fmt.Sprintf("node-%d", i), listen: listen, gossip: gossip,
			data: filepath.Join(cfg.Dir, fmt.Sprintf("node-%d", i)), logPath: filepath.Join(cfg.Dir, fmt.Sprintf("node-%d.log", i)),
		}
		n.args = []string{"serve", "--listen", listen, "--gossip", gossip, "--data", n.data, "--node-id", n.name,
			"--jwt-secret", cfg.JWTSecret, "--agent", cfg.Agent}
		if cfg.Window > 0 {
			n.args = append(n.args, "--window", cfg.Window.String())
		}
		if cfg.Agent == "demo" && cfg.ToolDelay > 0 {
			n.args = append(n.args, "--demo-search-delay", cfg.ToolDelay.String())
		}
		if cfg.Agent == "http" {
			n.args = append(n.args, "--agent-url", cfg.AgentURL)
		}
		if cfg.Lab != nil {
			n.args = append(n.args, "--cluster-secret", secret)
		}
		n.args = append(n.args, cfg.Extra...)
		l.nodes = append(l.nodes, n)
	}
	for i := range l.nodes {
		if err := l.Start(ctx, i); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	return l, nil
}

// addrs picks node i's HTTP and gossip addresses: free loopback ports, or
// fixed ports on its own address in the lab.
func (l *Local) addrs(i int) (listen, gossip string, err error) {
	if lab := l.cfg.Lab; lab != nil {
		return netip.AddrPortFrom(lab.Addr(i), labHTTPPort).String(), netip.AddrPortFrom(lab.Addr(i), labGossipPort).String(), nil
	}
	if listen, err = cluster.FreeLocalAddr(false); err != nil {
		return "", "", err
	}
	gossip, err = cluster.FreeLocalAddr(true)
	return listen, gossip, err
}

// DialContext connects to a node's address: directly, or from inside the
// namespace of the node with that address (a client on its side of any
// cut).
func (l *Local) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if l.cfg.Lab != nil {
		for i, n := range l.nodes {
			if n.listen == addr {
				return l.cfg.Lab.DialContext(ctx, i, network, addr)
			}
		}
	}
	return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
}

// URLs are the nodes' WebSocket URLs.
func (l *Local) URLs() []string {
	urls := make([]string, len(l.nodes))
	for i, n := range l.nodes {
		urls[i] = "ws://" + n.listen + "/v1/ws"
	}
	return urls
}

// Len is the number of nodes.
func (l *Local) Len() int { return len(l.nodes) }

// Name is node i's name.
func (l *Local) Name(i int) string { return l.nodes[i].name }

// Running reports whether node i's process is running.
func (l *Local) Running(i int) bool {
	n := l.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked()
}

func (n *localNode) runningLocked() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// childEnv is the environment without TETHER_* variables, so that the
// caller's shell cannot change what the nodes run.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") {
			env = append(env, kv)
		}
	}
	return env
}

var listeningRE = regexp.MustCompile(`msg=listening\b`)

// joinArgs: at the first start every node but the first joins the
// first; a restarted node joins all the others, so that restarting the
// first one does not leave it alone.
func (l *Local) joinArgs(i int) []string {
	var seeds []string
	for j, o := range l.nodes {
		if j != i && (l.nodes[i].starts > 0 || j == 0) {
			seeds = append(seeds, o.gossip)
		}
	}
	if len(seeds) == 0 {
		return nil
	}
	return []string{"--join", strings.Join(seeds, ",")}
}

// Start starts node i (again) and waits until it is ready.
func (l *Local) Start(ctx context.Context, i int) error {
	n := l.nodes[i]
	n.mu.Lock()
	if n.runningLocked() {
		n.mu.Unlock()
		return fmt.Errorf("bench: %s is already running", n.name)
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.mu.Unlock()
		return fmt.Errorf("bench: node log: %w", err)
	}
	args := append(slices.Clone(n.args), l.joinArgs(i)...)
	cmd := exec.Command(l.cfg.Bin, args...)
	if l.cfg.Lab != nil {
		cmd = l.cfg.Lab.Command(context.Background(), i, l.cfg.Bin, args...)
	}
	cmd.Env = childEnv()
	if l.cfg.Agent == "http" {
		cmd.Env = append(cmd.Env, "TETHER_AGENT_SECRET="+l.cfg.AgentSecret)
	}
	// Its own process group: a ^C to the harness does not reach the nodes,
	// which the harness stops itself; and no node outlives the harness.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		_ = logf.Close()
		n.mu.Unlock()
		return err
	}
	done := make(chan error, 1)
	l.forks <- func() { done <- cmd.Start() }
	if err := <-done; err != nil {
		_ = logf.Close()
		n.mu.Unlock()
		return fmt.Errorf("bench: start %s (%s): %w", n.name, l.cfg.Bin, err)
	}
	exited, listening := make(chan struct{}), make(chan struct{})
	n.cmd, n.exited = cmd, exited
	n.starts++
	n.cpuDone += n.cpuLast
	n.lastPID, n.lastTick, n.lastCPU, n.cpuLast = cmd.Process.Pid, time.Time{}, 0, 0
	n.mu.Unlock()
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			_, _ = logf.Write(append(sc.Bytes(), '\n'))
			if !seen && listeningRE.Match(sc.Bytes()) {
				seen = true
				close(listening)
			}
		}
		_, _ = io.Copy(logf, pipe)
		_ = cmd.Wait()
		_ = logf.Close()
	}()
	if err := n.waitReady(ctx, l.DialContext, l.cfg.StartTimeout, listening, exited); err != nil {
		_ = l.Signal(i, syscall.SIGKILL)
		return fmt.Errorf("bench: %s did not start: %w\n%s", n.name, err, tail(n.logPath, 20))
	}
	return nil
}

func (n *localNode) waitReady(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), timeout time.Duration, listening, exited chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case <-listening:
	case <-exited:
		return errors.New("it exited")
	case <-ctx.Done():
		return fmt.Errorf("no `listening` line: %w", ctx.Err())
	}
	url := "http://" + n.listen + "/readyz"
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: dial}} // no idle connection left behind
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("it exited")
		case <-ctx.Done():
			return fmt.Errorf("/readyz not 200: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Signal sends sig to node i's process and waits (up to 20s, then
// SIGKILL) until it has exited.
func (l *Local) Signal(i int, sig syscall.Signal) error {
	n := l.nodes[i]
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	running := n.runningLocked()
	n.mu.Unlock()
	if !running {
		return nil
	}
	l.sampleNode(n, time.Now()) // the CPU it used, before it is gone
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("bench: signal %s: %w", n.name, err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

// Pause stops node i's process (SIGSTOP) or, with pause false, lets it
// run again (SIGCONT). Unlike Signal it does not wait: the process stays.
func (l *Local) Pause(i int, pause bool) error {
	n := l.nodes[i]
	n.mu.Lock()
	cmd, running := n.cmd, n.runningLocked()
	n.mu.Unlock()
	if !running {
		return nil
	}
	sig := syscall.SIGCONT
	if pause {
		sig = syscall.SIGSTOP
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("bench: signal %s: %w", n.name, err)
	}
	return nil
}

// forker runs the forks, locked to its thread until Close.
func (l *Local) forker() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for f := range l.forks {
		f()
	}
}

// Close stops every node with SIGTERM (SIGKILL after 20s). Safe twice.
func (l *Local) Close() error {
	var wg sync.WaitGroup
	errs := make([]error, len(l.nodes))
	for i := range l.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = l.Signal(i, syscall.SIGTERM) }()
	}
	wg.Wait()
	l.forksEnd.Do(func() { close(l.forks) })
	return errors.Join(errs...)
}

// NodeStat is what /proc says about one node.
type NodeStat struct {
	Name       string  `json:"name"`
	URL        string  `json:"url"`
	Starts     int     `json:"starts"`
	RSSPeak    int64   `json:"rss_peak_bytes"`
	RSSLast    int64   `json:"rss_last_bytes"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// Sample reads every running node's RSS and CPU from /proc and returns
// the totals: RSS in bytes and CPU in percent of one core since the
// previous sample.
func (l *Local) Sample(now time.Time) (int64, float64) {
	var rss int64
	var cpu float64
	for _, n := range l.nodes {
		r, c := l.sampleNode(n, now)
		rss += r
		cpu += c
	}
	return rss, cpu
}

func (l *Local) sampleNode(n *localNode, now time.Time) (int64, float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.runningLocked() {
		return 0, 0
	}
	rss, cpuSec, err := procStat(n.lastPID)
	if err != nil {
		return 0, 0
	}
	var pct float64
	if !n.lastTick.IsZero() {
		if dt := now.Sub(n.lastTick).Seconds(); dt > 0 {
			pct = max(cpuSec-n.lastCPU, 0) / dt * 100
		}
	}
	n.lastTick, n.lastCPU, n.cpuLast = now, cpuSec, cpuSec
	n.rssLast, n.rssPeak = rss, max(n.rssPeak, rss)
	return rss, pct
}

// Stats returns each node's figures.
func (l *Local) Stats() []NodeStat {
	urls := l.URLs()
	out := make([]NodeStat, len(l.nodes))
	for i, n := range l.nodes {
		n.mu.Lock()
		out[i] = NodeStat{Name: n.name, URL: urls[i], Starts: n.starts, RSSPeak: n.rssPeak, RSSLast: n.rssLast,
			CPUSeconds: n.cpuDone + n.cpuLast}
		n.mu.Unlock()
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times; 100 on every
// Linux architecture Go runs on.
const clockTicks = 100

// procStat reads a process's resident set size (bytes) and CPU time
// (user+system, seconds) from /proc.
func procStat(pid int) (int64, float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name may hold spaces: fields start after the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errors.New("bench: unexpected /proc stat format")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15,
	// rss (pages) field 24.
	if len(f) < 22 {
		return 0, 0, errors.New("bench: short /proc stat")
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	return pages * int64(os.Getpagesize()), (ut + st) / clockTicks, nil
}
