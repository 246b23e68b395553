package main

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// netProxy is a TCP relay in front of a node that plays a failing
// network: blackhole stops forwarding both ways on the open connections
// without closing them, as a phone losing signal does, and while down it
// cuts new connections at once.
type netProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu       sync.Mutex
	conns    []*netConn
	down     bool
	accepted int
	lastFwd  time.Time // when the server last sent the client a byte
}

type netConn struct {
	client, server net.Conn
	dead           atomic.Bool
}

func newNetProxy(t *testing.T, target string) *netProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &netProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *netProxy) addr() string  { return p.ln.Addr().String() }
func (p *netProxy) wsURL() string { return "ws://" + p.addr() + "/v1/ws" }

func (p *netProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.accepted++
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		nc := &netConn{client: c, server: s}
		p.mu.Lock()
		p.conns = append(p.conns, nc)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.relay(nc, c, s, false)
		go p.relay(nc, s, c, true)
	}
}

func (p *netProxy) relay(nc *netConn, from, to net.Conn, down bool) {
	defer p.wg.Done()
	defer func() {
		nc.client.Close()
		nc.server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !nc.dead.Load() {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
			if down {
				p.mu.Lock()
				p.lastFwd = time.Now()
				p.mu.Unlock()
			}
		}
		if err != nil {
			return
		}
	}
}

// blackhole silently kills the open connections; down also cuts new ones
// until up.
func (p *netProxy) blackhole(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, nc := range p.conns {
		nc.dead.Store(true)
	}
	p.down = down
}

func (p *netProxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// connections is how many connections the proxy accepted.
func (p *netProxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// quietFor waits until the server has sent nothing for d.
func (p *netProxy) quietFor(t *testing.T, d time.Duration) {
	t.Helper()
	poll(t, 20*time.Second, "a quiet connection", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return time.Since(p.lastFwd) >= d
	})
}

func (p *netProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, nc := range p.conns {
		nc.client.Close()
		nc.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
