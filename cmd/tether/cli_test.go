package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// runTether runs the binary to completion (at most 20s) and returns its
// stdout, stderr and exit code.
func runTether(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runTetherEnv(t, nil, args...)
}

// runTetherEnv is runTether with extra environment variables (KEY=value).
func runTetherEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := nodetest.Binary(t) // built before the command's time runs
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(childEnv(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("tether %v still running after 20s\nstderr:\n%s", args, errOut.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("tether %v: %v", args, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

func TestCLI(t *testing.T) {
	t.Parallel()

	t.Run("token", func(t *testing.T) {
		t.Parallel()
		out, stderr, code := runTether(t, "token", "--user", "alice", "--secret", "S")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		id, err := gateway.Verify([]byte("S"), strings.TrimSpace(out), time.Now())
		if err != nil {
			t.Fatalf("Verify(%q): %v", out, err)
		}
		if id.UserID != "alice" {
			t.Errorf("token is for %q, want alice", id.UserID)
		}
		if _, err := gateway.Verify([]byte("other"), strings.TrimSpace(out), time.Now()); err == nil {
			t.Error("token verifies with another secret")
		}
		if _, stderr, code := runTether(t, "token", "--secret", "S"); code == 0 || !strings.Contains(stderr, "--user") {
			t.Errorf("token without --user: exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("serve gossiping off loopback without a cluster secret", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := runTether(t, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(),
			"--jwt-secret", "S", "--gossip", "0.0.0.0:7946")
		if code == 0 || !strings.Contains(stderr, "--cluster-secret") {
			t.Fatalf("exit %d, stderr %q: want a refusal naming --cluster-secret", code, stderr)
		}
	})

	t.Run("serve with half of the link's certificate flags", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--cluster-secret", "C", "--cluster-cert", "c.pem"}, "--cluster-cert, --cluster-key and --cluster-ca go together"},
			{[]string{"--cluster-cert", "c.pem", "--cluster-key", "k.pem", "--cluster-ca", "ca.pem"}, "needs --cluster-secret"},
			{[]string{"--cluster-secret", "C", "--cluster-cert", "none.pem", "--cluster-key", "none.pem", "--cluster-ca", "none.pem"}, "node link TLS"},
		} {
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--jwt-secret", "S", "--gossip", "127.0.0.1:0"}, tc.args...)
			if _, stderr, code := runTether(t, args...); code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("tether %v: exit %d, stderr %q, want %q", tc.args, code, stderr, tc.want)
			}
		}
	})

	t.Run("serve without a secret", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := runTether(t, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir())
		if code == 0 {
			t.Fatalf("serve without a secret exited 0\nstderr:\n%s", stderr)
		}
		if !strings.Contains(stderr, "--jwt-secret") {
			t.Errorf("error does not name --jwt-secret:\n%s", stderr)
		}
	})

	t.Run("serve with dev tokens", func(t *testing.T) {
		t.Parallel()
		data := t.TempDir()
		p := startProc(t, data, "--dev-tokens")
		resp, err := http.Post(p.httpURL()+"/dev/token", "application/json", strings.NewReader(`{"user":"alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Token string `json:"token"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || body.Token == "" {
			t.Fatalf("POST /dev/token: HTTP %d, %v, %+v", resp.StatusCode, err, body)
		}
		secret, err := os.ReadFile(filepath.Join(data, "dev-jwt-secret"))
		if err != nil {
			t.Fatalf("dev secret not kept in the data dir: %v", err)
		}
		if id, err := gateway.Verify(secret, body.Token, time.Now()); err != nil || id.UserID != "alice" {
			t.Errorf("dev token: %+v, %v", id, err)
		}
		c := dial(t, p.wsURL())
		if s := c.hello(body.Token, "", 0); s.Reason != "new" || s.SessionID == "" {
			t.Errorf("hello with a dev token: %s", s.Raw)
		}
		if code, _ := p.term(10 * time.Second); code != 0 {
			t.Errorf("exit %d after SIGTERM", code)
		}
	})

	t.Run("dev tokens off", func(t *testing.T) {
		t.Parallel()
		p := startServe(t, t.TempDir())
		resp, err := http.Post(p.httpURL()+"/dev/token", "application/json", strings.NewReader(`{"user":"alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("POST /dev/token without --dev-tokens: HTTP %d, want 404", resp.StatusCode)
		}
	})

	t.Run("unknown command", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := runTether(t, "frobnicate")
		if code == 0 || !strings.Contains(stderr, "usage: tether") || !strings.Contains(stderr, "frobnicate") {
			t.Errorf("unknown command: exit %d, stderr:\n%s", code, stderr)
		}
		_, stderr, code = runTether(t)
		if code == 0 || !strings.Contains(stderr, "usage: tether") {
			t.Errorf("no command: exit %d, stderr:\n%s", code, stderr)
		}
	})

	t.Run("unknown agent", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := runTether(t, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--jwt-secret", "S", "--agent", "nope")
		if code == 0 || !strings.Contains(stderr, `unknown --agent "nope"`) {
			t.Errorf("--agent nope: exit %d, stderr:\n%s", code, stderr)
		}
	})
}
