package faultnet

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what happens to new connections.
type Mode int

const (
	Up     Mode = iota // relayed
	Refuse             // closed at once
	Stall              // accepted and never forwarded
)

// Proxy relays TCP connections to a target address. Its zero value is not
// usable: call New.
type Proxy struct {
	ln     net.Listener
	wg     sync.WaitGroup
	notify chan struct{} // capacity 1: something was swallowed

	mu      sync.Mutex
	target  string
	conns   []*Conn
	swallow bytes.Buffer
	mode    Mode
	lastFwd time.Time // when the server last sent a client a byte
}

// Conn is one relayed connection.
type Conn struct {
	client, server net.Conn
	muted          atomic.Bool // server → client swallowed
	dead           atomic.Bool // both ways swallowed
	ws             atomic.Bool // carried a WebSocket upgrade to /v1/ws

	mu                       sync.Mutex
	clientClose, serverClose time.Time // first close frame from each side
}

// Closes reports when each side first sent a WebSocket close frame (zero:
// not yet).
func (pc *Conn) Closes() (client, server time.Time) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.clientClose, pc.serverClose
}

func (pc *Conn) shut() {
	pc.client.Close()
	pc.server.Close()
}

// New listens on an ephemeral port of 127.0.0.1 and relays to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, notify: make(chan struct{}, 1)}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port; URL its WebSocket endpoint.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }
func (p *Proxy) URL() string  { return "ws://" + p.Addr() + "/v1/ws" }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode, target := p.mode, p.target
		p.mu.Unlock()
		if mode == Refuse {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		pc := &Conn{client: c, server: s}
		pc.dead.Store(mode == Stall)
		p.mu.Lock()
		p.conns = append(p.conns, pc)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.relay(pc, c, s, false)
		go p.relay(pc, s, c, true)
	}
}

// relay copies from → to, or swallows once the connection is dead (or,
// downstream, muted). Either side ending closes both, unless the
// connection is dead: a lost signal tells neither side anything, so only
// Close closes it then.
func (p *Proxy) relay(pc *Conn, from, to net.Conn, down bool) {
	defer p.wg.Done()
	var frames frameScanner
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			pc.watch(&frames, buf[:n], !down)
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
					pc.shutUnlessDead()
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
			pc.shutUnlessDead()
			return
		}
	}
}

func (pc *Conn) shutUnlessDead() {
	if !pc.dead.Load() {
		pc.shut()
	}
}

// watch notes, from what one direction carries, a WebSocket upgrade and
// the first close frame.
func (pc *Conn) watch(frames *frameScanner, chunk []byte, fromClient bool) {
	if fromClient && bytes.Contains(chunk, []byte("GET /v1/ws")) {
		pc.ws.Store(true)
	}
	if !frames.feed(chunk) {
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	at := &pc.serverClose
	if fromClient {
		at = &pc.clientClose
	}
	if at.IsZero() {
		*at = time.Now()
	}
}

// WebSockets are the connections that carried a WebSocket upgrade, oldest
// first.
func (p *Proxy) WebSockets() []*Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*Conn
	for _, pc := range p.conns {
		if pc.ws.Load() {
			out = append(out, pc)
		}
	}
	return out
}

// Count is how many connections the proxy has relayed.
func (p *Proxy) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Mute swallows, from now on, what the server sends on open connections.
func (p *Proxy) Mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.muted.Store(true)
	}
}

// Blackhole kills the open connections silently (nothing is forwarded
// either way, nothing is closed) and treats new ones per mode.
func (p *Proxy) Blackhole(mode Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.dead.Store(true)
	}
	p.mode = mode
}

// SetMode sets what happens to new connections.
func (p *Proxy) SetMode(mode Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
}

// SetTarget sends new connections to another address.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// Quiet is how long the server has sent the clients nothing.
func (p *Proxy) Quiet() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Since(p.lastFwd)
}

// Swallowed reports whether the muted bytes contain text; Notify receives
// when more were swallowed.
func (p *Proxy) Swallowed(text string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Contains(p.swallow.Bytes(), []byte(text))
}

func (p *Proxy) Notify() <-chan struct{} { return p.notify }

// Close stops listening, closes every connection and waits for the relays.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for _, pc := range p.conns {
		pc.shut()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
