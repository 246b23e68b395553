package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/gateway/tlstest"
)

// A node started with --tls-cert/--tls-key serves https:// and wss://:
// `tether chat --ca-cert` talks to it (its dev token over https too) and
// `tether bench --ca-cert` passes against it; a SIGHUP with a new
// certificate on disk makes new connections see the new certificate, and
// a SIGHUP with a bad one is logged and keeps the old one.
func TestTLSServeReloadAndClients(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	caFile := ca.WriteCA(t, dir)
	certFile, keyFile := ca.WriteLeaf(t, dir, "first")
	p := startProc(t, t.TempDir(), "--dev-tokens", "--tls-cert", certFile, "--tls-key", keyFile)
	if got := tlstest.PeerCommonName(t, p.addr, ca.ClientConfig()); got != "first" {
		t.Fatalf("served certificate %q, want first", got)
	}

	// Plain text is refused with how to reach the node.
	resp, err := http.Get(p.httpURL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body.Error, "https://") {
		t.Fatalf("plain GET /healthz: %d %q", resp.StatusCode, body.Error)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()}}
	resp, err = hc.Get("https://" + p.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("https GET /readyz: %d", resp.StatusCode)
	}

	wss := "wss://" + p.addr + "/v1/ws"
	c := startChatProc(t, "--url", wss, "--ca-cert", caFile, "--user", "alice")
	c.waitFor(`connected to wss://`)
	c.typeLine("hello over tls")
	c.waitFor(`\] agent: .*hello over tls`)
	c.typeLine("/quit")
	if code := c.exit(); code != 0 {
		t.Fatalf("chat exit %d\n%s%s", code, c.stdout(), c.stderr())
	}
	if !strings.Contains(c.stdout(), "--ca-cert "+caFile) {
		t.Errorf("the resume command lacks --ca-cert:\n%s", c.stdout())
	}

	// Without the CA the chat does not trust the node, and says so.
	c = startChatProc(t, "--url", wss, "--user", "alice")
	c.waitFor(`certificate`)
	c.interrupt()
	c.exit()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bench := exec.CommandContext(ctx, nodetest.Binary(t), "bench", "--url", wss, "--ca-cert", caFile, "--dev-tokens",
		"--sessions", "3", "--ramp", "200ms", "--duration", "2s", "--drop-every", "700ms", "--away-max", "200ms")
	bench.Env = childEnv()
	if out, err := bench.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASSED") {
		t.Fatalf("tether bench over wss: %v\n%s", err, out)
	}

	// A renewed certificate, then SIGHUP: new connections get it.
	ca.WriteLeaf(t, dir, "second")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if _, err := p.waitLog("TLS certificate reloaded", 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, p.Stderr())
	}
	if got := tlstest.PeerCommonName(t, p.addr, ca.ClientConfig()); got != "second" {
		t.Fatalf("after SIGHUP the node serves %q, want second", got)
	}

	// A bad certificate on disk, then SIGHUP: logged, the last good one stays.
	tlstest.WriteFile(t, certFile, []byte("not a certificate"))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	line, err := p.waitLog("TLS certificate reload failed", 10*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, p.Stderr())
	}
	if !strings.Contains(line, certFile) {
		t.Errorf("the reload error does not name the file: %s", line)
	}
	if got := tlstest.PeerCommonName(t, p.addr, ca.ClientConfig()); got != "second" {
		t.Fatalf("after a bad reload the node serves %q, want second", got)
	}
	if !p.running() {
		t.Fatalf("the node exited on a bad reload:\n%s", p.Stderr())
	}
}

// A certificate that does not load stops `tether serve` at the start with
// an error naming the flag and the file; so does half of the pair.
func TestTLSBadCertAtStart(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "cert.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", bad, "--tls-key", keyFile}, "--tls-cert/--tls-key: gateway: bad TLS certificate: " + bad},
		{[]string{"--tls-cert", bad}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", filepath.Join(dir, "missing.pem"), "--tls-key", keyFile}, "no such file"},
	} {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--jwt-secret", testSecret}, tc.args...)
		_, stderr, code := runTether(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	_, stderr, code := runTether(t, "chat", "--url", "wss://127.0.0.1:1/v1/ws", "--token", "x", "--ca-cert", bad)
	if code != 2 || !strings.Contains(stderr, "--ca-cert: client: bad CA certificate file") {
		t.Errorf("chat with a bad --ca-cert: exit %d, %q", code, stderr)
	}
}
