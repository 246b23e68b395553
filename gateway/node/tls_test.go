package node_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/client"
	"github.com/tether-dev/tether/gateway/node"
	"github.com/tether-dev/tether/gateway/tlstest"
)

// A node with Gateway.TLS: clients reach it over wss:// and https://; a
// plain-text request is refused with 400, except the node link's when
// the link itself is plain text (no cluster secret: loopback tests);
// CertFiles.Reload swaps the
// certificate new connections see and keeps the old one when the files
// do not load.
func TestNodeServesTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	certFile, keyFile := ca.WriteLeaf(t, dir, "first")
	certs, err := gateway.NewCertFiles(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	link := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "the link") })
	n, err := node.New(node.Config{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Gateway: gateway.Config{Secret: secret, TLS: certs.TLSConfig(), Link: link}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if !strings.HasPrefix(n.URL(), "wss://") || !strings.HasPrefix(n.HTTP(), "https://") {
		t.Fatalf("URLs of a TLS node: %s %s", n.URL(), n.HTTP())
	}

	get := func(hc *http.Client, url string) (int, string) {
		t.Helper()
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	secure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(), DisableKeepAlives: true}}
	if code, body := get(plain, "http://"+n.Addr+"/healthz"); code != http.StatusBadRequest || !strings.Contains(body, "use https:// or wss://") {
		t.Errorf("plain /healthz: %d %s", code, body)
	}
	if code, body := get(plain, "http://"+n.Addr+"/v1/link"); code != http.StatusOK || body != "the link" {
		t.Errorf("plain /v1/link: %d %s", code, body)
	}
	if code, body := get(secure, n.HTTP()+"/readyz"); code != http.StatusOK {
		t.Errorf("https /readyz: %d %s", code, body)
	}

	tok, err := gateway.Issue(secret, gateway.TokenSpec{User: "alice", TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{URLs: []string{n.URL()}, Token: tok, TLS: ca.ClientConfig()})
	if err != nil {
		t.Fatalf("wss dial with the CA: %v", err)
	}
	if _, err := c.Send(ctx, "over tls", nil); err != nil {
		t.Fatalf("send over wss: %v", err)
	}
	_ = c.Close()
	if _, err := client.Dial(ctx, client.Config{URLs: []string{n.URL()}, Token: tok, MaxAttempts: 1}); err == nil {
		t.Error("a client that does not trust the CA connected")
	}

	ca.WriteLeaf(t, dir, "second")
	if err := certs.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := tlstest.PeerCommonName(t, n.Addr, ca.ClientConfig()); got != "second" {
		t.Fatalf("after Reload: %q, want second", got)
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := certs.Reload(); !errors.Is(err, gateway.ErrBadCert) {
		t.Fatalf("Reload of a bad key: %v, want ErrBadCert", err)
	}
	if got := tlstest.PeerCommonName(t, n.Addr, ca.ClientConfig()); got != "second" {
		t.Fatalf("after a bad Reload: %q, want second", got)
	}
}

// TestClusterLinkTLS: nodes that share a cluster secret run Raft and the
// node link over TLS on their client port (a write through one node is
// stored on the other, which needs both); the link and Raft paths refuse
// plain text, a TLS handshake that does not ask for the link's protocol
// gets no certificate (clients use plain text here), and one keyed by
// another secret is refused.
func TestClusterLinkTLS(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, opts{secret: "the cluster's secret"})
	n1, n2 := c.nodes[0], c.nodes[1]
	w := startWriter(t, "tls", func(int) *tnode { return n1 })
	w.waitAcks(3)
	w.stop()
	actortest.Eventually(t, "both copies of the session", func() bool {
		h1, ok1 := header(n1, w.sid)
		h2, ok2 := header(n2, w.sid)
		return ok1 && ok2 && h1.LastSeq == h2.LastSeq && h1.LastSeq > 0
	})

	plain := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/v1/link", "/v1/raft"} {
		resp, err := plain.Get("http://" + n1.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "encrypted") {
			t.Errorf("plain %s: %d %s, want 403", path, resp.StatusCode, b)
		}
	}
	if resp, err := plain.Get("http://" + n1.Addr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("plain /healthz for clients: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}

	dialTLS := func(cfg *tls.Config) error {
		d := &tls.Dialer{Config: cfg, NetDialer: &net.Dialer{Timeout: 5 * time.Second}}
		conn, err := d.DialContext(context.Background(), "tcp", n1.Addr)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}
	if err := dialTLS(&tls.Config{InsecureSkipVerify: true}); err == nil {
		t.Error("a TLS handshake without the link's ALPN succeeded on a node whose clients use plain text")
	}
	other, err := cluster.NewLinkTLS(cluster.LinkTLSConfig{Secret: "another secret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := dialTLS(other.Client); err == nil {
		t.Error("a link handshake keyed by another secret succeeded")
	}
	same, err := cluster.NewLinkTLS(cluster.LinkTLSConfig{Secret: "the cluster's secret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := dialTLS(same.Client); err != nil {
		t.Errorf("a link handshake keyed by the cluster's secret: %v", err)
	}
}
