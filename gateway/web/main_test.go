package web_test

// The browser suite: the real tether binary (built once, by nodetest) serving the
// demo page to a real headless Chromium driven with chromedp.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"github.com/tether-dev/tether/gateway/node/nodetest"
)

var (
	// browserCtx is a started Chromium, or nil when there is none
	// (noBrowser says why).
	browserCtx context.Context
	noBrowser  string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tether-web-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdtemp:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The tether binary the tests build (nodetest.Binary) is shared by
	// them all, so removed only once they have run.
	defer nodetest.RemoveBinary()

	stop, err := startBrowser(filepath.Join(dir, "chromium-profile"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "start chromium:", err)
		return 1
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			return 1
		}
	}
	return code
}

// chromiumPath is $TETHER_CHROMIUM, or Debian's chromium on $PATH, if
// it is an executable.
func chromiumPath() string {
	names := []string{"chromium", "/usr/bin/chromium"}
	if p := os.Getenv("TETHER_CHROMIUM"); p != "" {
		names = []string{p}
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts one headless Chromium for the whole suite (each test
// gets its own tab in its own browser context, so storage is not shared).
// Without a chromium binary it records why in noBrowser and returns no
// error: tests then skip, or fail under TETHER_BROWSER_TESTS=1.
func startBrowser(profile string) (stop func(), err error) {
	path := chromiumPath()
	if path == "" {
		noBrowser = "no chromium found (install Debian's chromium: `make chromium`, or set TETHER_CHROMIUM)"
		return func() {}, nil
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1000, 800),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	browserCtx = ctx
	return func() { cancel(); cancelAlloc() }, nil
}

// needBrowser skips the test without a browser, unless the environment
// says browser tests must run (make test sets TETHER_BROWSER_TESTS=1).
func needBrowser(t *testing.T) {
	t.Helper()
	if browserCtx != nil {
		return
	}
	if os.Getenv("TETHER_BROWSER_TESTS") == "1" {
		t.Fatalf("TETHER_BROWSER_TESTS=1 but %s", noBrowser)
	}
	t.Skipf("skipping the browser test: %s (set TETHER_BROWSER_TESTS=1 to make this a failure)", noBrowser)
}
