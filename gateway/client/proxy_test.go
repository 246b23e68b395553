package client

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is a TCP relay in front of a node that plays a failing network:
// mute swallows what the server sends on the connections open at the
// time (acks lost on the way); blackhole stops forwarding both ways on
// them, without closing anything, as a phone losing signal does; and
// while down, new connections are cut at once (refuse) or accepted and
// never forwarded (stall).
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   []*pconn
	swallow bytes.Buffer
	notify  chan struct{} // capacity 1: something was swallowed
	mode    int           // for new connections: up, refuse, stall
	lastFwd time.Time     // when the server last sent the client a byte
}

const (
	up = iota
	refuse
	stall
)

type pconn struct {
	client, server net.Conn
	muted          atomic.Bool // server → client swallowed
	dead           atomic.Bool // both ways swallowed
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, notify: make(chan struct{}, 1)}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) url() string { return "ws://" + p.ln.Addr().String() + "/v1/ws" }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()

		if mode == refuse {
			c.Close()
			continue
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		pc := &pconn{client: c, server: s}
		pc.dead.Store(mode == stall)
		p.mu.Lock()
		p.conns = append(p.conns, pc)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			p.relay(pc, c, s, false)
			pc.shut()
		}()
		go func() {
			defer p.wg.Done()
			p.relay(pc, s, c, true)
			pc.shut()
		}()
	}
}

// relay copies from → to, or swallows once the connection is dead (or,
// downstream, muted).
func (p *proxy) relay(pc *pconn, from, to net.Conn, down bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			switch {
			case pc.dead.Load():
			case down && pc.muted.Load():
				p.mu.Lock()
				p.swallow.Write(buf[:n])
				p.mu.Unlock()
				select {
				case p.notify <- struct{}{}:
				default:
				}
			default:
				if _, werr := to.Write(buf[:n]); werr != nil {
					return
				}
				if down {
					p.mu.Lock()
					p.lastFwd = time.Now()
					p.mu.Unlock()
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (pc *pconn) shut() {
	pc.client.Close()
	pc.server.Close()
}

// count is how many connections the proxy has relayed.
func (p *proxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// mute swallows, from now on, what the server sends on open connections.
func (p *proxy) mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.muted.Store(true)
	}
}

// blackhole kills the open connections silently (nothing is forwarded
// either way, nothing is closed) and treats new ones per mode until up.
func (p *proxy) blackhole(mode int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.dead.Store(true)
	}
	p.mode = mode
}

// setTarget sends new connections to another address.
func (p *proxy) setTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// setMode sets what happens to new connections: up, refuse or stall.
func (p *proxy) setMode(mode int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
}

// quietFor waits until the server has sent the client nothing for d: the
// scenario "an idle connection, then the network dies".
func (p *proxy) quietFor(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		p.mu.Lock()
		since := time.Since(p.lastFwd)
		p.mu.Unlock()
		if since >= d {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connection never went quiet for %v", d)
		}
		time.Sleep(min(d-since, 50*time.Millisecond))
	}
}

// waitMuted waits until the swallowed bytes contain text.
func (p *proxy) waitMuted(t *testing.T, text string) {
	t.Helper()
	timeout := time.After(wait)
	for {
		p.mu.Lock()
		ok := bytes.Contains(p.swallow.Bytes(), []byte(text))
		p.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-p.notify:
		case <-timeout:
			t.Fatalf("the server never sent %q", text)
		}
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, pc := range p.conns {
		pc.shut()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// countHandler is a slog.Handler that counts warnings and worse.
type countHandler struct{ n atomic.Int64 }

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }
func (h *countHandler) warnings() int64                    { return h.n.Load() }
