package netns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// newLab makes a lab closed at the test's end, or skips the test when
// namespaces are unsupported here.
func newLab(t *testing.T, cfg Config) *Lab {
	t.Helper()
	l, err := New(context.Background(), cfg)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("network namespaces unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l
}

// serveTCP listens on node i's address and accepts (and closes) until
// the test ends.
func serveTCP(t *testing.T, l *Lab, i int, addr netip.Addr) string {
	t.Helper()
	ln, err := l.Listen(context.Background(), i, "tcp", netip.AddrPortFrom(addr, 9000).String())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

// dial connects from node i within d and reports the error.
func dial(l *Lab, i int, addr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := l.DialContext(ctx, i, "tcp", addr)
	if err == nil {
		_ = c.Close()
	}
	return err
}

// isTimeout reports whether err is a dial that ran out of time. The
// dialer says so either as the context's error or as its own "i/o
// timeout", depending on whether the deadline struck in the connect
// syscall's poll or in the context's watcher.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func TestLabCutAndHeal(t *testing.T) {
	l := newLab(t, Config{Nodes: 3})
	ctx := context.Background()
	target := serveTCP(t, l, 1, l.Addr(1))
	for _, from := range []int{0, 1, 2} {
		if err := dial(l, from, target, 2*time.Second); err != nil {
			t.Fatalf("node %d → node 1 before any cut: %v", from, err)
		}
	}
	if err := l.Cut(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := dial(l, 0, target, 2*time.Second); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("node 0 → node 1 after Cut: %v, want EINVAL (a blackhole route)", err)
	}
	if err := dial(l, 2, target, 2*time.Second); err != nil {
		t.Errorf("node 2 → node 1 after Cut(0, 1): %v", err)
	}
	if err := l.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dial(l, 0, target, 2*time.Second); err != nil {
		t.Errorf("node 0 → node 1 after Heal: %v", err)
	}
	if err := l.Isolate(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := dial(l, 2, target, 2*time.Second); err == nil {
		t.Error("node 2 reached node 1 while isolated")
	}
	if err := dial(l, 0, target, 2*time.Second); err != nil {
		t.Errorf("node 0 → node 1 while node 2 is isolated: %v", err)
	}
	if err := l.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dial(l, 2, target, 2*time.Second); err != nil {
		t.Errorf("node 2 → node 1 after Heal: %v", err)
	}
}

// TestLabCutOneWay: datagrams flow to→from only; TCP fails both ways,
// at once from the cut side and by timeout from the other.
func TestLabCutOneWay(t *testing.T) {
	l := newLab(t, Config{Nodes: 2})
	ctx := context.Background()
	const from, to = 0, 1
	pcs := make([]net.PacketConn, 2)
	for i := range pcs {
		pc, err := l.ListenPacket(ctx, i, "udp", netip.AddrPortFrom(l.Addr(i), 9001).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		pcs[i] = pc
	}
	// recv reports whether node i got a datagram within d.
	recv := func(i int, d time.Duration) bool {
		buf := make([]byte, 16)
		_ = pcs[i].SetReadDeadline(time.Now().Add(d))
		_, _, err := pcs[i].ReadFrom(buf)
		return err == nil
	}
	send := func(i, j int) error {
		_, err := pcs[i].WriteTo([]byte("x"), pcs[j].LocalAddr())
		return err
	}
	if err := send(from, to); err != nil || !recv(to, 2*time.Second) {
		t.Fatalf("no datagram before the cut: %v", err)
	}
	if err := l.CutOneWay(ctx, from, to); err != nil {
		t.Fatal(err)
	}
	if err := send(to, from); err != nil || !recv(from, 2*time.Second) {
		t.Errorf("to → from datagram lost after CutOneWay(from, to): %v", err)
	}
	if err := send(from, to); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("from → to datagram: %v, want EINVAL", err)
	}
	// The other side's datagrams still come, so the wait below is the
	// price of showing one does not: 300 ms of silence after the send.
	if recv(to, 300*time.Millisecond) {
		t.Error("a datagram from → to arrived after CutOneWay(from, to)")
	}
	target := serveTCP(t, l, to, l.Addr(to))
	if err := dial(l, from, target, 2*time.Second); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("TCP from → to: %v, want EINVAL", err)
	}
	back := serveTCP(t, l, from, l.Addr(from))
	if err := dial(l, to, back, 500*time.Millisecond); !isTimeout(err) {
		t.Errorf("TCP to → from: %v, want a timeout (the SYN-ACK is dropped)", err)
	}
	if err := l.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dial(l, to, back, 2*time.Second); err != nil {
		t.Errorf("TCP to → from after Heal: %v", err)
	}
}

// TestLabBlockOneAddress: with two addresses per node, blocking one
// leaves the other reachable.
func TestLabBlockOneAddress(t *testing.T) {
	l := newLab(t, Config{Nodes: 2, AddrsPerNode: 2})
	ctx := context.Background()
	a, b := serveTCP(t, l, 1, l.AddrOf(1, 0)), serveTCP(t, l, 1, l.AddrOf(1, 1))
	if err := l.Block(ctx, 0, l.AddrOf(1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := dial(l, 0, a, 2*time.Second); err != nil {
		t.Errorf("first address blocked too: %v", err)
	}
	if err := dial(l, 0, b, 2*time.Second); err == nil {
		t.Error("blocked address reachable")
	}
}

// TestLabsApart: two labs use the same addresses without seeing each
// other, and the host namespace holds none of them.
func TestLabsApart(t *testing.T) {
	l1, l2 := newLab(t, Config{Nodes: 2}), newLab(t, Config{Nodes: 2})
	if l1.Namespace(0) == l2.Namespace(0) {
		t.Fatalf("two labs share namespace %s", l1.Namespace(0))
	}
	target := serveTCP(t, l1, 1, l1.Addr(1))
	if err := dial(l2, 0, target, 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the other lab's node 0 → %s: %v, want refused (its own node 1 has no listener)", target, err)
	}
	// Whether the host reaches 10.213.0.2 depends on its default route
	// (a sandbox's proxy may answer anything); what the lab owes is that
	// it put nothing of the subnet in the host namespace.
	out, err := exec.Command("ip", "-4", "-o", "addr").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "10.213.0.") {
		t.Errorf("the host namespace has a lab address: %s", out)
	}
}

func TestLabCommand(t *testing.T) {
	l := newLab(t, Config{Nodes: 2})
	out, err := l.Command(context.Background(), 1, "ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), l.Addr(1).String()+"/24") {
		t.Errorf("node 1's eth0: %s, want %s", out, l.Addr(1))
	}
}

// TestLabCloseLeavesNothing: the namespaces are gone after Close, a
// second Close is nil, and a cut after it is refused.
func TestLabCloseLeavesNothing(t *testing.T) {
	l := newLab(t, Config{Nodes: 3})
	names := []string{l.hub, l.Namespace(0), l.Namespace(1), l.Namespace(2)}
	for _, n := range names {
		if _, err := os.Stat(runDir + "/" + n); err != nil {
			t.Fatalf("namespace %s not made: %v", n, err)
		}
		if len(n) > 15 {
			t.Errorf("namespace name %s longer than 15", n)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.Contains(string(out), n) {
			t.Errorf("namespace %s still there after Close: %s", n, out)
		}
	}
	if err := l.Cut(context.Background(), 0, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Cut after Close: %v, want ErrClosed", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{}, {Nodes: 100}, {Nodes: 2, Prefix: "a-b"}, {Nodes: 2, Prefix: "toolong"}, {Nodes: 2, AddrsPerNode: 3}} {
		if _, err := New(context.Background(), c); err == nil || errors.Is(err, ErrUnsupported) {
			t.Errorf("New(%+v): %v, want a config error", c, err)
		}
	}
}
