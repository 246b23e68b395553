package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/tether-dev/tether/gateway/tlstest"
)

// startTLSLink is startLink with the link's TLS keyed by secret: the
// server handshakes every connection with LinkTLS.Server and the Link
// dials with LinkTLS.Client.
func startTLSLink(t testing.TB, secret string, cfg LinkConfig) *linkNode {
	t.Helper()
	lt, err := NewLinkTLS(LinkTLSConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return startLinkWith(t, lt, cfg)
}

func startLinkWith(t testing.TB, lt *LinkTLS, cfg LinkConfig) *linkNode {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	cfg.TLS = lt.Client
	l, err := NewLink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveLink(t, l, tlsHidden{ln, lt.Server}, ln.Addr().String())
}

// tlsHidden handshakes each connection with cfg and hands it to net/http
// as a plain net.Conn, as the gateway's listener does: net/http closes a
// *tls.Conn whose ALPN it does not know.
type tlsHidden struct {
	net.Listener
	cfg *tls.Config
}

func (l tlsHidden) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{tls.Server(c, l.cfg)}, nil
}

// tap is a TCP relay that keeps every byte it passes on.
type tap struct {
	ln    net.Listener
	mu    sync.Mutex
	seen  bytes.Buffer
	conns []net.Conn
	wg    sync.WaitGroup
}

func startTap(t *testing.T, to string) *tap {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tap{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			for _, pair := range [][2]net.Conn{{c, up}, {up, c}} {
				p.wg.Add(1)
				go func(dst, src net.Conn) {
					defer p.wg.Done()
					_, _ = io.Copy(dst, io.TeeReader(src, p))
					_ = dst.Close()
					_ = src.Close()
				}(pair[0], pair[1])
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *tap) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen.Write(b)
}

func (p *tap) saw(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Contains(p.seen.Bytes(), b)
}

// TestLinkEncrypted: a message between two nodes that share a secret
// crosses the wire encrypted; the same message on a plain-text link (no
// secret, loopback) is readable, which shows the tap would see it.
func TestLinkEncrypted(t *testing.T) {
	marker := []byte("a user's message: the cake is in the fridge")
	for _, tc := range []struct {
		name    string
		start   func(t testing.TB, id string) *linkNode
		visible bool
	}{
		{"tls", func(t testing.TB, id string) *linkNode {
			return startTLSLink(t, "s", LinkConfig{NodeID: id, Secret: "s", Serve: echoServe})
		}, false},
		{"plain", func(t testing.TB, id string) *linkNode {
			return startLink(t, "", LinkConfig{NodeID: id, Serve: echoServe})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, a := tc.start(t, "b"), tc.start(t, "a")
			p := startTap(t, b.addr)
			var got []byte
			if err := a.Call(context.Background(), p.ln.Addr().String(), "echo", marker, &got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, marker) {
				t.Fatalf("echo: %q", got)
			}
			if p.saw(marker) != tc.visible {
				t.Errorf("the marker on the wire: %v, want %v", p.saw(marker), tc.visible)
			}
		})
	}
}

// TestLinkTLSWrongSecret: a peer keyed by another secret fails the TLS
// handshake, reported as ErrAuth, and the server keeps no connection.
func TestLinkTLSWrongSecret(t *testing.T) {
	b := startTLSLink(t, "right", LinkConfig{NodeID: "b", Secret: "right", Serve: echoServe})
	a := startTLSLink(t, "wrong", LinkConfig{NodeID: "a", Secret: "wrong"})
	if err := a.Call(context.Background(), b.addr, "echo", "x", nil); !errors.Is(err, ErrAuth) {
		t.Fatalf("call with the wrong secret's certificate: %v, want ErrAuth", err)
	}
	if b.acceptedCount() != 0 {
		t.Fatal("the server kept a connection from a peer with the wrong key")
	}
}

// TestLinkTLSFromFiles: certificates given as files, checked against the
// CA; one from another CA is refused.
func TestLinkTLSFromFiles(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t), tlstest.NewCA(t)
	caFile := ca.WriteCA(t, dir)
	files := func(ca *tlstest.CA, name string) *LinkTLS {
		cert, key := ca.WriteLeaf(t, dir, name)
		lt, err := NewLinkTLS(LinkTLSConfig{CertFile: cert, KeyFile: key, CAFile: caFile})
		if err != nil {
			t.Fatal(err)
		}
		return lt
	}
	b := startLinkWith(t, files(ca, "b"), LinkConfig{NodeID: "b", Secret: "s", Serve: echoServe})
	a := startLinkWith(t, files(ca, "a"), LinkConfig{NodeID: "a", Secret: "s"})
	var from string
	if err := a.Call(context.Background(), b.addr, "from", nil, &from); err != nil || from != "a" {
		t.Fatalf("call with the CA's certificates: %q, %v", from, err)
	}
	x := startLinkWith(t, files(other, "x"), LinkConfig{NodeID: "x", Secret: "s"})
	if err := x.Call(context.Background(), b.addr, "echo", "x", nil); !errors.Is(err, ErrAuth) && !errors.Is(err, ErrLinkDown) {
		t.Fatalf("call with another CA's certificate: %v, want refused", err)
	}
	if b.acceptedCount() != 1 {
		t.Fatalf("the server holds %d connections, want a's only", b.acceptedCount())
	}
	for _, bad := range []LinkTLSConfig{{}, {CertFile: "x"}, {CertFile: "x", KeyFile: "y", CAFile: "z"}} {
		if _, err := NewLinkTLS(bad); !errors.Is(err, ErrLinkTLS) {
			t.Errorf("NewLinkTLS(%+v): %v, want ErrLinkTLS", bad, err)
		}
	}
}
