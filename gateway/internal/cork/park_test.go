//go:build linux

package cork

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// parkedPair accepts a real TCP connection through a Listener with p and
// returns the server's Conn (started, idle) and the client's socket.
func parkedPair(t *testing.T, ln net.Listener, p *Poller) (*Conn, net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	nc, err := Listener{Listener: ln, Pool: &sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}, Poller: p}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := nc.(*Conn)
	t.Cleanup(func() { c.Close() })
	c.Start(nil)
	return c, client
}

// TestParkWakesOnceForBytesCloseAndDeadline: a parked connection costs a
// slot in the poller and nothing else; its wake comes exactly once, when
// the client writes, when the server closes it, or when a read deadline
// is set; a lone pong wakes it only for Ready to drop it and park again.
func TestParkWakesOnceForBytesCloseAndDeadline(t *testing.T) {
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	const n = 4
	conns := make([]*Conn, n)
	clients := make([]net.Conn, n)
	wakes := make([]atomic.Int32, n)
	woken := make(chan int, 4*n)
	for i := range n {
		conns[i], clients[i] = parkedPair(t, ln, p)
		i := i
		if !conns[i].Park(0, func() { wakes[i].Add(1); woken <- i }) {
			t.Fatalf("conn %d did not park", i)
		}
	}
	if got := p.Parked(); got != n {
		t.Fatalf("Parked = %d, want %d", got, n)
	}
	wait := func(want int) {
		t.Helper()
		select {
		case i := <-woken:
			if i != want {
				t.Fatalf("conn %d woke, want %d", i, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("conn %d never woke", want)
		}
	}

	// 0: the client writes a frame.
	if _, err := clients[0].Write(wsFrame(true, 1, []byte("hi"))); err != nil {
		t.Fatal(err)
	}
	wait(0)
	if !conns[0].Ready(0) || len(conns[0].pending) == 0 {
		t.Fatal("Ready after a frame: nothing pending")
	}
	// 1: a lone pong wakes it; Ready drops it and it parks again.
	if _, err := clients[1].Write(wsFrame(true, 0xa, []byte("p"))); err != nil {
		t.Fatal(err)
	}
	wait(1)
	if conns[1].Ready(0) {
		t.Fatal("Ready after a lone pong says there is something to read")
	}
	if !conns[1].Park(0, func() { wakes[1].Add(1); woken <- 1 }) {
		t.Fatal("a connection woken by a pong did not park again")
	}
	// 2: the server closes it; 3: a read deadline is set.
	conns[2].Close()
	wait(2)
	if err := conns[3].SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	wait(3)
	if conns[3].Park(0, func() { t.Error("parked after a deadline") }) {
		t.Fatal("a connection with a read deadline parked again")
	}
	if got := p.Parked(); got != 1 {
		t.Fatalf("Parked = %d, want 1 (the pong's)", got)
	}
	// Closing the poller wakes what is left; nothing parks after.
	p.Close()
	wait(1)
	for i := range n {
		if w := wakes[i].Load(); w != 1 && !(i == 1 && w == 2) {
			t.Fatalf("conn %d woke %d times", i, w)
		}
	}
	if conns[0].Park(1, func() {}) {
		t.Fatal("parked in a closed poller")
	}
}
