package node_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/client"
	"github.com/tether-dev/tether/gateway/node"
	"github.com/tether-dev/tether/gateway/tlstest"
)

// A node with Gateway.TLS: clients reach it over wss:// and https://; a
// plain-text request is refused with 400, except the node link's, which
// peers dial as ws:// at the same address; CertFiles.Reload swaps the
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
