package cluster

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// The handshake, mutual and replay-proof without the secret on the wire:
//
//	dialer → GET Path, Upgrade, X-Tether-Link: 1, X-Tether-Node: D, X-Tether-Nonce: nd
//	server → 101, X-Tether-Node: S, X-Tether-Nonce: ns,
//	         X-Tether-Proof: HMAC(k, "server", nd, ns, S, D)   (fresh: nd is the dialer's)
//	dialer → first message: HMAC(k, "client", ns, nd, D, S)   (fresh: ns is the server's)
//	server → first message: "ok", or a 1008 policy close
//
// k is derived from the secret with a label of its own. A request without
// the headers gets 401 before any upgrade.
const (
	hdrVersion = "X-Tether-Link"
	hdrNode    = "X-Tether-Node"
	hdrNonce   = "X-Tether-Nonce"
	hdrProof   = "X-Tether-Proof"
	linkVer    = "1"
	nonceLen   = 32
)

var authOK = []byte("ok")

func (l *Link) proof(role string, nonces [2][]byte, ids [2]string) []byte {
	m := hmac.New(sha256.New, l.key)
	for _, part := range [][]byte{[]byte(role), nonces[0], nonces[1], []byte(ids[0]), []byte(ids[1])} {
		_ = binary.Write(m, binary.BigEndian, uint32(len(part))) // unambiguous concatenation
		m.Write(part)
	}
	return m.Sum(nil)
}

func newNonce() []byte {
	b := make([]byte, nonceLen)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return b
}

func decodeNonce(s string) ([]byte, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return b, err == nil && len(b) == nonceLen
}

var (
	b64       = base64.RawURLEncoding.EncodeToString
	decodeB64 = base64.RawURLEncoding.DecodeString
)

// Handler serves peers' connections; mount it at LinkConfig.Path.
func (l *Link) Handler() http.Handler { return http.HandlerFunc(l.serveHTTP) }

func (l *Link) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(hdrVersion) != linkVer {
		http.Error(w, "tether link: unsupported link version", http.StatusBadRequest)
		return
	}
	if l.cfg.Secret == "" && !isLoopbackHost(r.RemoteAddr) {
		l.log.Warn("link refused: no secret configured and the peer is not on loopback", "remote", r.RemoteAddr)
		http.Error(w, "tether link: no secret configured", http.StatusForbidden)
		return
	}
	peerID := r.Header.Get(hdrNode)
	nd, ok := decodeNonce(r.Header.Get(hdrNonce))
	if peerID == "" || !ok {
		l.log.Warn("link refused: no node id or nonce", "remote", r.RemoteAddr)
		http.Error(w, "tether link: authentication required", http.StatusUnauthorized)
		return
	}
	ns := newNonce()
	h := http.Header{}
	h.Set(hdrNode, l.cfg.NodeID)
	h.Set(hdrNonce, b64(ns))
	h.Set(hdrProof, b64(l.proof("server", [2][]byte{nd, ns}, [2]string{l.cfg.NodeID, peerID})))
	ws, err := l.upgrader.Upgrade(w, r, h)
	if err != nil {
		l.log.Debug("link upgrade failed", "remote", r.RemoteAddr, "err", err)
		return // the upgrader answered
	}
	want := l.proof("client", [2][]byte{ns, nd}, [2]string{peerID, l.cfg.NodeID})
	// The handler returns now; a goroutine of the Link's own finishes, so
	// net/http's buffers for this request are not kept alive.
	if !l.goSafe(func() { l.acceptConn(ws, peerID, want) }) {
		ws.Close()
	}
}

// acceptConn checks the dialer's proof, then runs the connection.
func (l *Link) acceptConn(ws *websocket.Conn, peerID string, want []byte) {
	remote := ws.RemoteAddr().String()
	_ = ws.SetReadDeadline(time.Now().Add(l.cfg.DialTimeout))
	mt, got, err := ws.ReadMessage()
	if err != nil {
		l.log.Warn("link peer gave up during authentication", "peer", peerID, "remote", remote, "err", err)
		ws.Close()
		return
	}
	if mt != websocket.BinaryMessage || !hmac.Equal(got, want) {
		l.log.Warn("link authentication failed: wrong proof (another secret?)", "peer", peerID, "remote", remote)
		refuse(ws)
		return
	}
	_ = ws.SetWriteDeadline(time.Now().Add(l.cfg.DialTimeout))
	if err := ws.WriteMessage(websocket.BinaryMessage, authOK); err != nil {
		ws.Close()
		return
	}
	c := newConn(l, ws, peerID, "")
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		ws.Close()
		return
	}
	l.accepted[c] = struct{}{}
	l.startConn(c)
	l.log.Debug("link accepted", "peer", peerID, "remote", remote)
}

// refuse closes ws with a policy-violation close, which the other side
// reports as ErrAuth.
func refuse(ws *websocket.Conn) {
	msg := websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "tether link: authentication failed")
	_ = ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	ws.Close()
}

// dialConn dials and authenticates addr within DialTimeout.
func (l *Link) dialConn(addr string) (*conn, error) {
	if l.cfg.Secret == "" && !isLoopbackHost(addr) {
		return nil, fmt.Errorf("%w: no secret configured, and %s is not loopback", ErrAuth, addr)
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.DialTimeout)
	defer cancel()
	nd := newNonce()
	h := http.Header{}
	h.Set(hdrVersion, linkVer)
	h.Set(hdrNode, l.cfg.NodeID)
	h.Set(hdrNonce, b64(nd))
	scheme := "ws://"
	if l.cfg.TLS != nil {
		scheme = "wss://"
	}
	ws, resp, err := l.dialer.DialContext(ctx, scheme+addr+l.cfg.Path, h)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("%w: dial %s: %s", ErrAuth, addr, resp.Status)
		}
		if resp != nil {
			return nil, fmt.Errorf("%w: dial %s: %s", ErrLinkDown, addr, resp.Status)
		}
		if errors.Is(err, errPeerCert) {
			l.log.Warn("link authentication failed: the peer's TLS certificate is not the cluster's", "addr", addr, "err", err)
			return nil, fmt.Errorf("%w: dial %s: %w", ErrAuth, addr, err)
		}
		return nil, fmt.Errorf("%w: dial %s: %w", ErrLinkDown, addr, err)
	}
	peerID := resp.Header.Get(hdrNode)
	ns, ok := decodeNonce(resp.Header.Get(hdrNonce))
	proof, _ := base64.RawURLEncoding.DecodeString(resp.Header.Get(hdrProof))
	want := l.proof("server", [2][]byte{nd, ns}, [2]string{peerID, l.cfg.NodeID})
	if !ok || peerID == "" || !hmac.Equal(proof, want) {
		l.log.Warn("link authentication failed: the peer's proof is wrong (another secret?)", "addr", addr, "peer", peerID)
		refuse(ws)
		return nil, fmt.Errorf("%w: %s (node %q) proved no shared secret", ErrAuth, addr, peerID)
	}
	if err := l.finishDial(ctx, ws, ns, nd, peerID); err != nil {
		ws.Close()
		return nil, fmt.Errorf("dial %s (node %q): %w", addr, peerID, err)
	}
	_ = ws.SetReadDeadline(time.Time{})
	return newConn(l, ws, peerID, addr), nil
}

// finishDial sends the dialer's proof and waits for the server's "ok".
func (l *Link) finishDial(ctx context.Context, ws *websocket.Conn, ns, nd []byte, peerID string) error {
	dl, _ := ctx.Deadline()
	_ = ws.SetWriteDeadline(dl)
	_ = ws.SetReadDeadline(dl)
	proof := l.proof("client", [2][]byte{ns, nd}, [2]string{l.cfg.NodeID, peerID})
	if err := ws.WriteMessage(websocket.BinaryMessage, proof); err != nil {
		return fmt.Errorf("%w: send proof: %w", ErrLinkDown, err)
	}
	_, msg, err := ws.ReadMessage()
	if err != nil {
		return readError(err)
	}
	if !bytes.Equal(msg, authOK) {
		return fmt.Errorf("%w: unexpected answer to the proof", ErrAuth)
	}
	return nil
}
