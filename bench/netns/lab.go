package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrUnsupported: the lab cannot run here (not root, no ip command, or
// namespaces cannot be made). New wraps it with the reason.
var ErrUnsupported = errors.New("netns: network namespaces unsupported")

// ErrClosed: the lab was closed.
var ErrClosed = errors.New("netns: lab closed")

// runDir is where ip netns keeps its named namespaces.
const runDir = "/run/netns"

// Limits of Config.
const (
	MaxNodes        = 99
	MaxAddrsPerNode = 2
)

// Config configures New.
type Config struct {
	// Nodes is the number of node namespaces, 1..MaxNodes.
	Nodes int
	// Prefix starts every namespace name: 1 to 4 ASCII letters. Default
	// "tl". Namespaces named with it whose process is gone are deleted
	// by New.
	Prefix string
	// AddrsPerNode is how many addresses each node's eth0 has,
	// 1..MaxAddrsPerNode. Default 1.
	AddrsPerNode int
	// IP is the iproute2 binary. Default: "ip" from $PATH.
	IP string
}

func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = "tl"
	}
	if c.AddrsPerNode == 0 {
		c.AddrsPerNode = 1
	}
	if c.IP == "" {
		c.IP = "ip"
	}
	switch {
	case c.Nodes < 1 || c.Nodes > MaxNodes:
		return c, fmt.Errorf("netns: Nodes %d, want 1..%d", c.Nodes, MaxNodes)
	case c.AddrsPerNode < 1 || c.AddrsPerNode > MaxAddrsPerNode:
		return c, fmt.Errorf("netns: AddrsPerNode %d, want 1..%d", c.AddrsPerNode, MaxAddrsPerNode)
	case len(c.Prefix) > 4 || strings.Trim(c.Prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != "":
		return c, fmt.Errorf("netns: Prefix %q, want 1 to 4 ASCII letters", c.Prefix)
	}
	return c, nil
}

// Lab is one set of namespaces on one switch. Its methods are safe for
// concurrent use.
type Lab struct {
	cfg   Config
	ip    string // resolved iproute2 binary
	hub   string
	nodes []string       // namespace names
	addrs [][]netip.Addr // [node][k]

	mu     sync.Mutex
	routes map[route]bool // blackholes added and not yet removed
	closed bool
}

type route struct {
	in   int
	addr netip.Addr
}

// New makes the lab: the hub with its bridge, then each node's namespace
// wired into it. On an error nothing is left behind.
func New(ctx context.Context, cfg Config) (*Lab, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w: not Linux", ErrUnsupported)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: needs root (euid %d)", ErrUnsupported, os.Geteuid())
	}
	ip, err := exec.LookPath(cfg.IP)
	if err != nil {
		return nil, fmt.Errorf("%w: no iproute2: %w", ErrUnsupported, err)
	}
	l := &Lab{cfg: cfg, ip: ip, routes: make(map[route]bool)}
	l.sweep(ctx)
	if err := l.makeHub(ctx); err != nil {
		return nil, err
	}
	for i := range cfg.Nodes {
		if err := l.makeNode(ctx, i); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	return l, nil
}

// makeHub picks the lab's names and creates the hub namespace and its
// bridge. A name taken by another lab makes it draw a new tag.
func (l *Lab) makeHub(ctx context.Context) error {
	for range 16 {
		var tag [1]byte
		if _, err := rand.Read(tag[:]); err != nil {
			return fmt.Errorf("netns: random tag: %w", err)
		}
		base := l.cfg.Prefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(tag[:])
		hub := base + "h"
		if _, err := os.Stat(runDir + "/" + hub); err == nil {
			continue
		}
		if err := l.run(ctx, "netns", "add", hub); err != nil {
			if _, serr := os.Stat(runDir + "/" + hub); serr == nil {
				continue // another lab of this process took it meanwhile
			}
			return fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		l.hub = hub
		for i := range l.cfg.Nodes {
			l.nodes = append(l.nodes, base+strconv.Itoa(i))
		}
		err := l.run(ctx, "-n", hub, "link", "add", "br0", "type", "bridge")
		if err == nil {
			err = l.run(ctx, "-n", hub, "link", "set", "br0", "up")
		}
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("%w: bridge: %w", ErrUnsupported, err)
		}
		return nil
	}
	return errors.New("netns: no free namespace name after 16 tries")
}

// makeNode creates node i's namespace, its veth into the bridge and its
// addresses.
func (l *Lab) makeNode(ctx context.Context, i int) error {
	ns, v := l.nodes[i], "v"+strconv.Itoa(i)
	if err := l.run(ctx, "netns", "add", ns); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	steps := [][]string{
		{"-n", l.hub, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", l.hub, "link", "set", v, "master", "br0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	}
	var addrs []netip.Addr
	for k := range l.cfg.AddrsPerNode {
		a := netip.AddrFrom4([4]byte{10, 213, 0, byte(1 + i + 100*k)})
		addrs = append(addrs, a)
		steps = append(steps, []string{"-n", ns, "addr", "add", a.String() + "/24", "dev", "eth0"})
	}
	steps = append(steps, []string{"-n", ns, "link", "set", "eth0", "up"})
	for _, s := range steps {
		if err := l.run(ctx, s...); err != nil {
			return fmt.Errorf("netns: node %d: %w", i, err)
		}
	}
	l.addrs = append(l.addrs, addrs)
	return nil
}

// sweep deletes namespaces of this prefix whose process is gone.
func (l *Lab) sweep(ctx context.Context) {
	ents, err := os.ReadDir(runDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), l.cfg.Prefix)
		pid, _, dash := strings.Cut(rest, "-")
		n, err := strconv.Atoi(pid)
		if !ok || !dash || err != nil || n <= 0 {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); errors.Is(err, os.ErrNotExist) {
			_ = l.run(ctx, "netns", "del", e.Name())
		}
	}
}

// run runs ip with args and returns its output in the error.
func (l *Lab) run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, l.ip, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// Nodes is the number of node namespaces.
func (l *Lab) Nodes() int { return len(l.nodes) }

// Namespace is node i's namespace name (for ip netns exec).
func (l *Lab) Namespace(i int) string { return l.nodes[i] }

// Addr is node i's first address.
func (l *Lab) Addr(i int) netip.Addr { return l.addrs[i][0] }

// AddrOf is node i's k-th address (k < Config.AddrsPerNode).
func (l *Lab) AddrOf(i, k int) netip.Addr { return l.addrs[i][k] }

// Command is name with args run inside node i's namespace. ip netns exec
// execs the program, so cmd.Process is the program itself.
func (l *Lab) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, l.ip, append([]string{"netns", "exec", l.nodes[i], name}, args...)...)
}

// Block drops everything namespace in sends to addr (a blackhole route).
func (l *Lab) Block(ctx context.Context, in int, addr netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if err := l.run(ctx, "-n", l.nodes[in], "route", "replace", "blackhole", addr.String()+"/32"); err != nil {
		return fmt.Errorf("netns: block: %w", err)
	}
	l.routes[route{in, addr}] = true
	return nil
}

// CutOneWay drops what from sends to any of to's addresses; what to
// sends still reaches from (see the package doc for what that does to
// TCP).
func (l *Lab) CutOneWay(ctx context.Context, from, to int) error {
	for _, a := range l.addrs[to] {
		if err := l.Block(ctx, from, a); err != nil {
			return err
		}
	}
	return nil
}

// Cut drops everything between a and b, both ways.
func (l *Lab) Cut(ctx context.Context, a, b int) error {
	if err := l.CutOneWay(ctx, a, b); err != nil {
		return err
	}
	return l.CutOneWay(ctx, b, a)
}

// Isolate cuts node i from every other node.
func (l *Lab) Isolate(ctx context.Context, i int) error {
	for j := range l.nodes {
		if j != i {
			if err := l.Cut(ctx, i, j); err != nil {
				return err
			}
		}
	}
	return nil
}

// Heal removes every route Block (and so the cuts) added.
func (l *Lab) Heal(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	rs := make([]route, 0, len(l.routes))
	for r := range l.routes {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b route) int { return a.in - b.in }) // stable logs
	var errs []error
	for _, r := range rs {
		if err := l.run(ctx, "-n", l.nodes[r.in], "route", "del", "blackhole", r.addr.String()+"/32"); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(l.routes, r)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netns: heal: %w", err)
	}
	return nil
}

// Close deletes the node namespaces (their veths go with them) and the
// hub (with the bridge). Safe twice. It does not take a context: it must
// run in a test's cleanup after the test's context has ended.
func (l *Lab) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	for _, ns := range append(slices.Clone(l.nodes), l.hub) {
		if _, err := os.Stat(runDir + "/" + ns); err != nil {
			continue // never made (New failed half way)
		}
		if err := l.run(context.Background(), "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netns: close: %w", err)
	}
	return nil
}
