package gateway_test

// Issue 6, item 6: HTTP connections cannot be held open for free. An idle
// keep-alive connection is closed after the idle timeout, and one that
// never finishes its request headers after the header timeout. (The
// defaults, 10s and 60s, are what `tether serve` runs with.)

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// closedByServer reads from nc until the server ends the connection and
// returns how long that took; it fails if the server keeps it open for
// 15s. Whatever the server says first (a 408, say) is returned too.
func closedByServer(t *testing.T, nc net.Conn) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	_ = nc.SetReadDeadline(start.Add(15 * time.Second))
	b, err := io.ReadAll(nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for 15s (read %q)", b)
	}
	return time.Since(start), string(b)
}

func TestHTTPTimeouts(t *testing.T) {
	t.Parallel()
	const idle, header = 500 * time.Millisecond, 700 * time.Millisecond
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{IdleTimeout: idle, HeaderTimeout: header}})
	addr := strings.TrimPrefix(n.HTTP, "http://")

	t.Run("idle keep-alive", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		// Two requests on the connection: it is kept alive…
		for range 2 {
			if _, err := io.WriteString(nc, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Close {
				t.Fatalf("GET /healthz: %d, close %v", resp.StatusCode, resp.Close)
			}
		}
		// …until it has been idle for the idle timeout.
		took, rest := closedByServer(t, nc)
		if took < idle-100*time.Millisecond || rest != "" {
			t.Fatalf("idle connection closed after %v (idle timeout %v), with %q", took, idle, rest)
		}
		t.Logf("idle keep-alive connection closed after %v", took.Round(time.Millisecond))
	})

	t.Run("half a header", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		start := time.Now()
		if _, err := io.WriteString(nc, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
		_, said := closedByServer(t, nc)
		took := time.Since(start)
		if took < header-100*time.Millisecond || (said != "" && !strings.Contains(said, " 408 ")) {
			t.Fatalf("a half-sent header was cut off after %v (header timeout %v), with %q", took, header, said)
		}
		t.Logf("half a header cut off after %v", took.Round(time.Millisecond))
	})

	t.Run("half a WebSocket upgrade", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := io.WriteString(nc, "GET /v1/ws HTTP/1.1\r\nHost: "+addr+"\r\nUpgrade: websocket\r\n"); err != nil {
			t.Fatal(err)
		}
		if took, said := closedByServer(t, nc); said != "" && !strings.Contains(said, " 408 ") {
			t.Fatalf("half an upgrade request: closed after %v with %q", took, said)
		}
	})
}
