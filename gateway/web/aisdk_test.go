package web_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needNode returns the node binary when node and the npm packages of
// package-lock.json (`npm ci` here; `make test` runs it) are there. Without
// them it skips, or fails when the environment says the Node tests must run
// (make test sets TETHER_NODE_TESTS=1).
func needNode(t *testing.T) string {
	t.Helper()
	why := ""
	node, err := exec.LookPath("node")
	if err != nil {
		why = "no node on $PATH"
	} else if _, err := os.Stat(filepath.Join("node_modules", "ai", "package.json")); err != nil {
		why = "no node_modules (run `npm ci` in gateway/web, or `make test`)"
	}
	if why == "" {
		return node
	}
	if os.Getenv("TETHER_NODE_TESTS") == "1" {
		t.Fatalf("TETHER_NODE_TESTS=1 but %s", why)
	}
	t.Skipf("skipping the Node tests: %s (set TETHER_NODE_TESTS=1 to make this a failure)", why)
	return ""
}

// nodeArgs are the flags node needs for the tests: a global WebSocket is
// built in from Node 22 and behind a flag in Node 20 and 21.
func nodeArgs(t *testing.T, node string) []string {
	t.Helper()
	out, err := exec.Command(node, "-e", "process.stdout.write(typeof WebSocket)").Output()
	if err != nil {
		t.Fatalf("node -e: %v", err)
	}
	if strings.TrimSpace(string(out)) == "function" {
		return nil
	}
	return []string{"--experimental-websocket"}
}

// TestAISDKNode runs tether-ai.test.mjs (node --test, the real `ai` and
// `@ai-sdk/react` packages) against a real node whose demo engine streams
// its replies word by word; node failing fails this test.
func TestAISDKNode(t *testing.T) {
	node := needNode(t)
	s := startServer(t, append(demoFlags, "--demo-stream-delay", "100ms")...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	args := append(nodeArgs(t, node), "--test", "--test-reporter=spec", "tether-ai.test.mjs")
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = append(os.Environ(), "TETHER_URL="+s.url(""), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	t.Logf("node %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
}
