package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/client"
)

// hookLog records a client's OnConnect and OnDisconnect calls.
type hookLog struct {
	mu       sync.Mutex
	connects int
	lost     []error
	change   chan struct{}
}

func newHookLog() *hookLog { return &hookLog{change: make(chan struct{}, 100)} }

func (h *hookLog) onConnect(string) {
	h.mu.Lock()
	h.connects++
	h.mu.Unlock()
	h.change <- struct{}{}
}

func (h *hookLog) onDisconnect(_ string, err error) {
	h.mu.Lock()
	h.lost = append(h.lost, err)
	h.mu.Unlock()
	h.change <- struct{}{}
}

// waitFor waits until cond holds, checking on every hook call.
func (h *hookLog) waitFor(t *testing.T, what string, cond func(connects int, lost []error) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		h.mu.Lock()
		ok := cond(h.connects, h.lost)
		h.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-h.change:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// The local node manager, the simulated network and the client's hooks,
// against a real `tether serve`: a cut is a lost connection, a frozen
// connection passes nothing until the client drops it, a SIGKILLed node
// comes back on its data and the session resumes there.
func TestLocalNodeNetworkAndHooks(t *testing.T) {
	const secret = "local-test-secret"
	l, err := NewLocal(context.Background(), LocalConfig{N: 1, Bin: serverBin(t), Dir: t.TempDir(), JWTSecret: secret, Agent: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tok, err := gateway.Issue([]byte(secret), gateway.TokenSpec{User: "alice"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var dialErrs []error
	var errMu sync.Mutex
	ns := newNetSim(nil, func(err error) { errMu.Lock(); dialErrs = append(dialErrs, err); errMu.Unlock() })
	h := newHookLog()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{
		URLs: l.URLs(), Token: tok, MaxBackoff: 200 * time.Millisecond,
		Dialer:    &websocket.Dialer{NetDialContext: ns.dial},
		OnConnect: h.onConnect, OnDisconnect: h.onDisconnect,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		for range c.Messages() {
		}
	}()
	h.waitFor(t, "the first attach", func(n int, _ []error) bool { return n == 1 })
	if _, err := c.Send(ctx, "one", nil); err != nil {
		t.Fatal(err)
	}

	// A cut: the client loses its socket and, once the network is back,
	// resumes; the hello of that connection is timed.
	ns.down(false)
	h.waitFor(t, "the cut to be noticed", func(_ int, lost []error) bool { return len(lost) == 1 })
	ns.restore()
	h.waitFor(t, "the resume after the cut", func(n int, _ []error) bool { return n == 2 })
	if sc := ns.lastConn(); sc == nil || sc.helloAt.Load() == 0 {
		t.Fatal("the new connection's hello was not timed")
	}

	// A silence: nothing passes and the client does not notice, until
	// Drop; the send then goes through on the next connection.
	ns.down(true)
	ns.restore() // new connections work; the frozen one stays frozen
	sendCtx, sendCancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Send(sendCtx, "two", nil)
	sendCancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a send on a frozen connection: %v, want no ack", err)
	}
	c.Drop()
	seq, err := c.SendID(ctx, "c-two", "two", nil)
	if err != nil || seq == 0 {
		t.Fatalf("send after Drop: %d, %v", seq, err)
	}
	h.waitFor(t, "the resume after the silence", func(n int, lost []error) bool { return n == 3 && len(lost) == 2 })

	// SIGKILL and restart on the same data: the client resumes by itself.
	rss, _ := l.Sample(time.Now())
	if rss <= 0 {
		t.Fatalf("node RSS %d", rss)
	}
	if err := l.Signal(0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the kill to be noticed", func(_ int, lost []error) bool { return len(lost) == 3 })
	if got := closeKind(h.lost[2]); got != "1006" {
		t.Errorf("a SIGKILLed node's socket ended as %q, want 1006", got)
	}
	// While it is down, a dial is refused, and the error is reported.
	if _, err := ns.dial(ctx, "tcp", l.nodes[0].listen); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial while the node is down: %v", err)
	}
	errMu.Lock()
	if len(dialErrs) == 0 || !errors.Is(dialErrs[len(dialErrs)-1], syscall.ECONNREFUSED) {
		t.Errorf("dial errors reported: %v", dialErrs)
	}
	errMu.Unlock()
	if err := l.Start(ctx, 0); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the resume after the restart", func(n int, _ []error) bool { return n == 4 })
	if seq2, err := c.SendID(ctx, "c-two", "two", nil); err != nil || seq2 != seq {
		t.Fatalf("the same send id after the restart: %d, %v; want %d", seq2, err, seq)
	}
	if st := l.Stats(); st[0].Starts != 2 || st[0].RSSPeak <= 0 {
		t.Errorf("node stats %+v", st[0])
	}
}

// At the first start every node joins the first; a restarted node joins
// all the others, the first one included.
func TestLocalJoinArgs(t *testing.T) {
	l := &Local{}
	for i := range 3 {
		l.nodes = append(l.nodes, &localNode{name: fmt.Sprint("node-", i), gossip: fmt.Sprintf("127.0.0.1:%d", 7000+i)})
	}
	for i, want := range []string{"", "127.0.0.1:7000", "127.0.0.1:7000"} {
		if got := strings.Join(l.joinArgs(i), " "); want != "" && got != "--join "+want || want == "" && got != "" {
			t.Errorf("first start of node %d: %q, want --join %q", i, got, want)
		}
	}
	for _, n := range l.nodes {
		n.starts = 1
	}
	if got := strings.Join(l.joinArgs(0), " "); got != "--join 127.0.0.1:7001,127.0.0.1:7002" {
		t.Errorf("restart of node 0: %q", got)
	}
	if got := strings.Join(l.joinArgs(2), " "); got != "--join 127.0.0.1:7000,127.0.0.1:7001" {
		t.Errorf("restart of node 2: %q", got)
	}
}
