package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/gateway/internal/cork"
)

// ErrBadCert is a certificate or key file that cannot be used.
var ErrBadCert = errors.New("gateway: bad TLS certificate")

// CertFiles is a certificate and key read from two PEM files, kept in
// memory and swapped atomically by Reload, so that a certificate renewed
// on disk is served to new connections without a restart. Connections
// already open keep the certificate they were handshaken with.
type CertFiles struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
}

// NewCertFiles reads the pair once; an unreadable or mismatched pair is an
// error matching ErrBadCert.
func NewCertFiles(certFile, keyFile string) (*CertFiles, error) {
	c := &CertFiles{certFile: certFile, keyFile: keyFile}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again. On error the certificate served so far
// stays in place.
func (c *CertFiles) Reload() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("%w: %s, %s: %w", ErrBadCert, c.certFile, c.keyFile, err)
	}
	c.cur.Store(&cert)
	return nil
}

// GetCertificate is for tls.Config.GetCertificate.
func (c *CertFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

// TLSConfig is a server configuration that serves c's current certificate.
func (c *CertFiles) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate}
}

// tlsRecordHandshake is the first byte of every TLS connection (a
// handshake record carrying the ClientHello).
const tlsRecordHandshake = 0x16

// sniffListener makes each accepted connection TLS or plain by its first
// byte. A TLS connection is a client's (Config.TLS) or a peer's node link
// (Config.LinkTLS), told apart by the ALPN the peer asks for (tlsFor);
// guardTLS then keeps each kind of request on the kind of connection it
// belongs to.
type sniffListener struct {
	net.Listener
	cfg *tls.Config
}

func (l sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, cfg: l.cfg}, nil
}

// sniffConn decides at its first Read or Write (the server reads first),
// not in Accept, so that a client slow to send its first byte holds up
// only itself and is bounded by the server's header timeout, whose
// deadline is already set on the socket then.
type sniffConn struct {
	net.Conn // the socket: Close and the deadlines go to it
	cfg      *tls.Config
	once     sync.Once
	inner    net.Conn // *tls.Conn, or the socket with the sniffed byte put back
	err      error
	plain    atomic.Bool
}

func (c *sniffConn) decide() {
	c.once.Do(func() {
		var b [1]byte
		if _, err := io.ReadFull(c.Conn, b[:]); err != nil {
			c.err = err
			return
		}
		pc := &prefixConn{Conn: c.Conn, pre: b[:]}
		if b[0] == tlsRecordHandshake {
			c.inner = tls.Server(pc, c.cfg)
			return
		}
		c.plain.Store(true)
		c.inner = pc
	})
}

func (c *sniffConn) Read(p []byte) (int, error) {
	if c.decide(); c.err != nil {
		return 0, c.err
	}
	return c.inner.Read(p)
}

func (c *sniffConn) Write(p []byte) (int, error) {
	if c.decide(); c.err != nil {
		return 0, c.err
	}
	return c.inner.Write(p)
}

// prefixConn reads pre before the socket.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

type sniffKey struct{}

// connContext remembers a request's connection for guardTLS.
func connContext(ctx context.Context, c net.Conn) context.Context {
	c = cork.Unwrap(c)
	if sc, ok := c.(*sniffConn); ok {
		return context.WithValue(ctx, sniffKey{}, sc)
	}
	return ctx
}

// link reports whether the connection was handshaken as a node link.
func (c *sniffConn) link() bool {
	tc, ok := c.inner.(*tls.Conn)
	return ok && tc.ConnectionState().NegotiatedProtocol == cluster.LinkALPN
}

// tlsFor picks the configuration of one TLS handshake: the node link's
// for a peer that asks for it, the clients' otherwise.
func (s *Server) tlsFor(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	if s.cfg.LinkTLS != nil && slices.Contains(hello.SupportedProtos, cluster.LinkALPN) {
		return s.cfg.LinkTLS, nil
	}
	if s.cfg.TLS == nil {
		return nil, errors.New("gateway: this node takes TLS only from its cluster peers; clients use plain text")
	}
	return s.cfg.TLS, nil
}

// guardTLS keeps requests on the connections they belong to: the node
// link and Raft only on a link handshake when the link is encrypted (a
// plain-text peer, or a client's TLS, gets 403), and with client TLS no
// client request in plain text (400 and how to reach the node).
func (s *Server) guardTLS(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc, _ := r.Context().Value(sniffKey{}).(*sniffConn)
		plain := sc == nil || sc.plain.Load()
		if r.URL.Path == "/v1/link" || r.URL.Path == "/v1/raft" {
			if s.cfg.LinkTLS != nil && (sc == nil || !sc.link()) {
				w.Header().Set("Connection", "close")
				writeError(w, http.StatusForbidden, "the node link is encrypted: peers dial it with TLS and the cluster's certificate")
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		if plain && s.cfg.TLS != nil {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusBadRequest, "this node serves TLS: use https:// or wss://")
			return
		}
		h.ServeHTTP(w, r)
	})
}
