package client

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is a TCP relay in front of a node that can swallow what the
// server sends on the connections open at the time (mute), to lose acks
// the way a dying network does.
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   []*pconn
	swallow bytes.Buffer
	notify  chan struct{} // capacity 1: something was swallowed
}

type pconn struct {
	client, server net.Conn
	muted          atomic.Bool
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
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pc := &pconn{client: c, server: s}
		p.mu.Lock()
		p.conns = append(p.conns, pc)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			pc.shut()
		}()
		go func() {
			defer p.wg.Done()
			p.down(pc)
			pc.shut()
		}()
	}
}

// down relays server → client, or swallows it once muted.
func (p *proxy) down(pc *pconn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := pc.server.Read(buf)
		if n > 0 {
			if pc.muted.Load() {
				p.mu.Lock()
				p.swallow.Write(buf[:n])
				p.mu.Unlock()
				select {
				case p.notify <- struct{}{}:
				default:
				}
			} else if _, werr := pc.client.Write(buf[:n]); werr != nil {
				return
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

// count is how many connections the proxy has accepted.
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
