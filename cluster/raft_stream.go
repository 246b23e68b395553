package cluster

import (
	"bufio"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// raftStream carries Raft's RPCs over the node's HTTP listener, so a
// node needs no port of its own for them: a peer asks for /v1/raft with
// an Upgrade, both sides prove they hold the cluster secret as the link
// does (HMAC over both nonces and both ids, with labels of their own),
// and the connection is Raft's from then on. It implements
// raft.StreamLayer.
//
//	dialer → GET /v1/raft, Upgrade: tether-raft, X-Tether-Node: D, X-Tether-Nonce: nd
//	server → 101, X-Tether-Node: S, X-Tether-Nonce: ns, X-Tether-Proof: HMAC(k, "raft-server", nd, ns, S, D)
//	dialer → HMAC(k, "raft-client", ns, nd, D, S), then Raft's own bytes
type raftStream struct {
	link *Link
	addr raftAddr
	log  *slog.Logger

	accept chan net.Conn
	done   chan struct{}

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // accepted and dialed, closed at Close
}

const raftUpgrade = "tether-raft"

// handshakeTimeout bounds a Raft connection's proof exchange.
const handshakeTimeout = 5 * time.Second

func newRaftStream(link *Link, advertise string, log *slog.Logger) *raftStream {
	return &raftStream{
		link: link, addr: raftAddr(advertise), log: log,
		accept: make(chan net.Conn), done: make(chan struct{}), conns: map[net.Conn]struct{}{},
	}
}

type raftAddr string

func (a raftAddr) Network() string { return "tcp" }
func (a raftAddr) String() string  { return string(a) }

// Accept implements net.Listener.
func (s *raftStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.accept:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Addr implements net.Listener: the address peers dial.
func (s *raftStream) Addr() net.Addr { return s.addr }

// Close implements net.Listener; it also closes every Raft connection,
// which the HTTP server no longer tracks once hijacked. Safe twice.
func (s *raftStream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns { // each forgets itself under mu
		_ = c.Close()
	}
	return nil
}

// track keeps c to be closed with the stream; a stream already closed
// closes c instead (outside mu: c's Close takes it to forget itself).
func (s *raftStream) track(c net.Conn) bool {
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.conns[c] = struct{}{}
	}
	s.mu.Unlock()
	if closed {
		_ = c.Close()
	}
	return !closed
}

// trackedConn forgets itself when closed, and reads through the buffer
// the handshake read into.
type trackedConn struct {
	net.Conn
	r    io.Reader
	s    *raftStream
	once sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}

// ServeHTTP takes a peer's Raft connection.
func (s *raftStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l := s.link
	if r.Header.Get("Upgrade") != raftUpgrade {
		http.Error(w, "tether raft: upgrade required", http.StatusBadRequest)
		return
	}
	if l.cfg.Secret == "" && !isLoopbackHost(r.RemoteAddr) {
		http.Error(w, "tether raft: no secret configured", http.StatusForbidden)
		return
	}
	peerID := r.Header.Get(hdrNode)
	nd, ok := decodeNonce(r.Header.Get(hdrNonce))
	if peerID == "" || !ok {
		http.Error(w, "tether raft: authentication required", http.StatusUnauthorized)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "tether raft: cannot take the connection over", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	self := l.cfg.NodeID
	ns := newNonce()
	proof := l.proof("raft-server", [2][]byte{nd, ns}, [2]string{self, peerID})
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n%s: %s\r\n%s: %s\r\n%s: %s\r\n\r\n",
		raftUpgrade, hdrNode, self, hdrNonce, b64(ns), hdrProof, b64(proof))
	if err := brw.Flush(); err != nil {
		_ = conn.Close()
		return
	}
	got := make([]byte, len(proof))
	if _, err := io.ReadFull(brw, got); err != nil {
		_ = conn.Close()
		return
	}
	if !hmac.Equal(got, l.proof("raft-client", [2][]byte{ns, nd}, [2]string{peerID, self})) {
		s.log.Warn("raft connection refused: bad proof", "peer", peerID, "remote", r.RemoteAddr)
		_ = conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	tc := &trackedConn{Conn: conn, r: brw, s: s}
	if !s.track(tc) {
		return
	}
	select {
	case s.accept <- tc:
	case <-s.done:
		_ = tc.Close()
	}
}

// Dial implements raft.StreamLayer.
func (s *raftStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l := s.link
	ctx, cancel := context.WithTimeout(context.Background(), min(timeout, handshakeTimeout))
	defer cancel()
	var conn net.Conn
	var err error
	if l.cfg.TLS != nil {
		conn, err = dialTLS(ctx, "tcp", string(address), l.cfg.TLS)
	} else {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", string(address))
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: raft connection to %s: %w", address, err)
	}
	fail := func(err error) (net.Conn, error) {
		_ = conn.Close()
		return nil, fmt.Errorf("cluster: raft connection to %s: %w", address, err)
	}
	_ = conn.SetDeadline(time.Now().Add(min(timeout, handshakeTimeout)))
	self := l.cfg.NodeID
	nd := newNonce()
	if _, err := fmt.Fprintf(conn, "GET /v1/raft HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s: %s\r\n%s: %s\r\n\r\n",
		address, raftUpgrade, hdrNode, self, hdrNonce, b64(nd)); err != nil {
		return fail(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fail(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return fail(fmt.Errorf("status %s", resp.Status))
	}
	peerID := resp.Header.Get(hdrNode)
	ns, ok := decodeNonce(resp.Header.Get(hdrNonce))
	proof, err := decodeB64(resp.Header.Get(hdrProof))
	if !ok || err != nil || !hmac.Equal(proof, l.proof("raft-server", [2][]byte{nd, ns}, [2]string{peerID, self})) {
		return fail(errors.New("the peer did not prove it holds the cluster secret"))
	}
	if _, err := conn.Write(l.proof("raft-client", [2][]byte{ns, nd}, [2]string{self, peerID})); err != nil {
		return fail(err)
	}
	_ = conn.SetDeadline(time.Time{})
	tc := &trackedConn{Conn: conn, r: br, s: s}
	if !s.track(tc) {
		return nil, net.ErrClosed
	}
	return tc, nil
}
