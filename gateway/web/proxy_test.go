package web_test

// A TCP proxy between the browser and a node that can blackhole its
// connections the way a lost mobile signal does: bytes stop flowing in both
// directions and neither side is closed or told. It also counts WebSocket
// upgrades and notes who sent the first WebSocket close frame on each.

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type proxy struct {
	t  *testing.T
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	target string // where new connections go
	links  []*link
	down   bool // new connections are blackholed from the start
}

// link is one proxied TCP connection.
type link struct {
	client, server net.Conn
	dead           atomic.Bool // blackholed: read and discard, forward nothing
	ws             atomic.Bool // carried a WebSocket upgrade to /v1/ws

	mu                       sync.Mutex
	clientClose, serverClose time.Time // first close frame from each side
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) url(path string) string { return "http://" + p.addr() + path }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil { // the node is down: the client sees its connection fail
			c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		l.dead.Store(p.down)
		p.links = append(p.links, l)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(l, s, c, true)
		go p.pipe(l, c, s, false)
	}
}

// pipe copies src to dst until either fails; a blackholed link keeps
// reading (so the sender's buffers do not fill, as on a real lost signal)
// and forwards nothing, and is only closed by close.
func (p *proxy) pipe(l *link, dst, src net.Conn, fromClient bool) {
	defer p.wg.Done()
	var fs frameScanner
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if fromClient && bytes.Contains(chunk, []byte("GET /v1/ws")) {
				l.ws.Store(true)
			}
			if fs.feed(chunk) {
				l.mu.Lock()
				at := &l.serverClose
				if fromClient {
					at = &l.clientClose
				}
				if at.IsZero() {
					*at = time.Now()
				}
				l.mu.Unlock()
			}
			if !l.dead.Load() {
				if _, err := dst.Write(chunk); err != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	if !l.dead.Load() {
		l.client.Close()
		l.server.Close()
	}
}

// blackhole silences every connection open now; later ones flow unless
// setDown(true).
func (p *proxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		l.dead.Store(true)
	}
}

// setTarget sends new connections to another address (a restarted node).
func (p *proxy) setTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

// setDown makes new connections blackholed (true) or flowing (false).
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// wsLinks are the connections that carried a WebSocket upgrade, oldest first.
func (p *proxy) wsLinks() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*link
	for _, l := range p.links {
		if l.ws.Load() {
			out = append(out, l)
		}
	}
	return out
}

func (p *proxy) wsCount() int { return len(p.wsLinks()) }

// closes reports when each side first sent a WebSocket close frame (zero: not yet).
func (l *link) closes() (client, server time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clientClose, l.serverClose
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, l := range p.links {
		l.dead.Store(true) // pipes must not race to close: close here
		l.client.Close()
		l.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// frameScanner follows one direction of a connection: the HTTP head, then
// WebSocket frames, reporting whether a chunk completed a close frame header.
type frameScanner struct {
	upgraded bool
	head     []byte // unparsed bytes: HTTP head, or a partial frame header
	skip     uint64 // payload bytes of the current frame still to pass
}

func (f *frameScanner) feed(b []byte) (sawClose bool) {
	for len(b) > 0 {
		if !f.upgraded {
			f.head = append(f.head, b...)
			b = nil
			i := bytes.Index(f.head, []byte("\r\n\r\n"))
			if i < 0 {
				if len(f.head) > 64<<10 {
					f.head = nil // not HTTP as expected: stop looking
				}
				return sawClose
			}
			f.upgraded = true
			b = append([]byte(nil), f.head[i+4:]...)
			f.head = nil
			continue
		}
		if f.skip > 0 {
			n := min(uint64(len(b)), f.skip)
			f.skip -= n
			b = b[n:]
			continue
		}
		f.head = append(f.head, b...)
		b = nil
		for len(f.head) >= 2 {
			h := f.head
			size, need := uint64(h[1]&0x7f), 2
			switch size {
			case 126:
				need += 2
			case 127:
				need += 8
			}
			if h[1]&0x80 != 0 {
				need += 4 // mask key
			}
			if len(h) < need {
				break
			}
			switch size {
			case 126:
				size = uint64(binary.BigEndian.Uint16(h[2:4]))
			case 127:
				size = binary.BigEndian.Uint64(h[2:10])
			}
			if h[0]&0x0f == 0x8 {
				sawClose = true
			}
			h = h[need:]
			if uint64(len(h)) >= size {
				f.head = append([]byte(nil), h[size:]...)
				continue
			}
			f.skip = size - uint64(len(h))
			f.head = nil
		}
	}
	return sawClose
}
