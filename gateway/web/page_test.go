package web_test

// Driving the demo page in Chromium: a tab per test, waits on DOM
// conditions with generous deadlines, screenshots.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// wait is the deadline of one DOM condition: generous, for a loaded
// 2-core machine; conditions that are met return as soon as they are.
const wait = 30 * time.Second

// page is one browser tab showing the demo page.
type page struct {
	t      *testing.T
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	dir string // where screenshots go

	mu      sync.Mutex
	console []string
}

// openPage opens url in a new tab of a new browser context (its own
// localStorage). The tab is closed when the test ends.
func openPage(t *testing.T, url string) *page {
	t.Helper()
	needBrowser(t)
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	p := &page{t: t, ctx: ctx, cancel: cancel, dir: artifactsDir(t)}
	t.Cleanup(p.close)
	if err := chromedp.Do(ctx); err != nil { // opens the tab
		t.Fatalf("open a tab: %v", err)
	}
	p.watchConsole()
	p.navigate(url)
	return p
}

// newTab opens url in another tab of the same browser context (shared
// localStorage), as a user opening the page twice.
func (p *page) newTab(url string) *page {
	p.t.Helper()
	ctx, cancel := chromedp.NewContext(p.ctx)
	q := &page{t: p.t, ctx: ctx, cancel: cancel, dir: p.dir}
	p.t.Cleanup(q.close)
	if err := chromedp.Do(ctx); err != nil {
		p.t.Fatalf("open a tab: %v", err)
	}
	q.watchConsole()
	q.navigate(url)
	return q
}

func (p *page) watchConsole() {
	msgs := chromedp.Console(p.ctx)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for m, err := range msgs {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.console = append(p.console, m.Time.Format("15:04:05.000")+" "+m.String())
			p.mu.Unlock()
		}
	}()
}

func (p *page) close() {
	if p.t.Failed() {
		p.screenshot("failed")
		p.mu.Lock()
		p.t.Logf("browser console:\n%s", strings.Join(p.console, "\n"))
		p.mu.Unlock()
	}
	p.cancel()
	p.wg.Wait()
}

func (p *page) navigate(url string) {
	p.t.Helper()
	p.do("navigate to "+url, chromedp.Navigate(url))
	// The module has run once #status has left its static first state or
	// #log shows anything; tether is then on window.
	p.waitJS("the page script to run", `window.tether !== undefined`)
}

func (p *page) reload() {
	p.t.Helper()
	p.do("reload", chromedp.Reload())
	p.waitJS("the page script to run after the reload", `window.tether !== undefined`)
}

// do runs actions with the test deadline.
func (p *page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, wait)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v\n%s", what, err, p.describe())
	}
}

// eval evaluates a JavaScript expression and decodes its JSON value into out.
func (p *page) eval(expr string, out any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, wait)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](`JSON.stringify(`+expr+`)`, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	var s string
	if string(raw) == "null" { // undefined
		return
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		p.t.Fatalf("evaluate %s: %v (%s)", expr, err, raw)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(s), out); err != nil {
			p.t.Fatalf("evaluate %s: %v (%s)", expr, err, s)
		}
	}
}

// waitJS waits until the JavaScript expression is truthy.
func (p *page) waitJS(what, expr string) {
	p.t.Helper()
	p.waitJSFor(what, expr, wait)
}

func (p *page) waitJSFor(what, expr string, d time.Duration) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, d+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		p.t.Fatalf("waiting for %s: %v\n%s", what, err, p.describe())
	}
}

// describe is what the page shows, for failure messages.
func (p *page) describe() string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`"status[" + document.querySelector("#status")?.dataset.state + "]: " + document.querySelector("#status")?.textContent +
		 "\nbanner: " + (document.querySelector("#banner")?.hidden ? "" : document.querySelector("#banner")?.textContent) +
		 "\nlog:\n" + Array.from(document.querySelectorAll("#log > *"), e => "  " + (e.dataset.seq || "-") + " " + e.textContent.slice(0, 120)).join("\n")`))
	if err != nil {
		return "(page state unavailable: " + err.Error() + ")"
	}
	return s
}

// state is #status's data-state.
func (p *page) state() string {
	var s string
	p.eval(`document.querySelector("#status").dataset.state`, &s)
	return s
}

func (p *page) waitState(state string) {
	p.t.Helper()
	p.waitJS("#status[data-state="+state+"]", fmt.Sprintf(`document.querySelector("#status").dataset.state === %q`, state))
}

// typeAndEnter types text into #input and presses Enter.
func (p *page) typeAndEnter(text string) {
	p.t.Helper()
	p.do("type "+text, chromedp.SendKeys(chromedp.ID("input"), text+"\n"))
}

// sendValue puts text into #input and clicks #send (for texts too long to type).
func (p *page) sendValue(text string) {
	p.t.Helper()
	js, _ := json.Marshal(text)
	p.eval(`(document.querySelector("#input").value = `+string(js)+`, 1)`, nil)
	p.do("click #send", chromedp.Click(chromedp.ID("send")))
}

// logEntry is one #log element with a data-seq.
type logEntry struct {
	Seq  int    `json:"seq"`
	Role string `json:"role"`
	Text string `json:"text"`
}

func (p *page) entries() []logEntry {
	var out []logEntry
	p.eval(`Array.from(document.querySelectorAll("#log > [data-seq]"), e => ({seq: +e.dataset.seq, role: e.dataset.role, text: e.textContent}))`, &out)
	return out
}

// waitEntry waits for an entry of role whose text contains text.
func (p *page) waitEntry(role, text string) {
	p.t.Helper()
	js, _ := json.Marshal(text)
	p.waitJS(fmt.Sprintf("a %s entry with %q", role, text), fmt.Sprintf(
		`Array.from(document.querySelectorAll('#log > [data-seq][data-role=%q]')).some(e => e.textContent.includes(%s))`, role, js))
}

// checkOrder fails unless the entries are exactly seqs 1..n in order.
func checkOrder(t *testing.T, es []logEntry) {
	t.Helper()
	for i, e := range es {
		if e.Seq != i+1 {
			t.Fatalf("#log entry %d has data-seq %d, want %d (no gap, no repeat, in order): %+v", i, e.Seq, i+1, es)
		}
	}
}

// countText counts #log elements (entries, pending or refused sends) whose text contains s.
func (p *page) countText(s string) int {
	js, _ := json.Marshal(s)
	var n int
	p.eval(`Array.from(document.querySelectorAll("#log > *")).filter(e => e.textContent.includes(`+string(js)+`)).length`, &n)
	return n
}

// recordStates keeps every change of #status's data-state in
// window.__states as {state, text, at} (at: Unix ms), so short-lived states
// are not missed between polls.
func (p *page) recordStates() {
	p.eval(`(() => {
		const s = document.querySelector("#status");
		window.__states = [{state: s.dataset.state, text: s.textContent, at: Date.now()}];
		new MutationObserver(() => {
			const last = window.__states[window.__states.length - 1];
			if (last.state !== s.dataset.state || last.text !== s.textContent) window.__states.push({state: s.dataset.state, text: s.textContent, at: Date.now()});
		}).observe(s, {attributes: true, childList: true, characterData: true, subtree: true});
		return 1;
	})()`, nil)
}

// recordSockets notes in window.__sockets, in the order they happen, the
// session frames that sockets opened from now on receive ("session on
// new") and every close() the page makes ("close old" for a socket opened
// before, "close new" for one opened after).
func (p *page) recordSockets() {
	p.eval(`(() => {
		window.__sockets = [];
		const Real = window.WebSocket, close = Real.prototype.close;
		Real.prototype.close = function (...args) {
			window.__sockets.push(this.__recorded ? "close new" : "close old");
			return close.apply(this, args);
		};
		window.WebSocket = class extends Real {
			constructor(...args) {
				super(...args);
				this.__recorded = true;
				this.addEventListener("message", (ev) => {
					try { if (JSON.parse(ev.data).type === "session") window.__sockets.push("session on new"); } catch {}
				});
			}
		};
		return 1;
	})()`, nil)
}

type stateChange struct {
	State string `json:"state"`
	Text  string `json:"text"`
	At    int64  `json:"at"`
}

func (p *page) states() []stateChange {
	var out []stateChange
	p.eval(`window.__states`, &out)
	return out
}

func artifactsDir(t *testing.T) string {
	dir := os.Getenv("TETHER_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts dir: %v", err)
	}
	return dir
}

// screenshot saves a PNG of the page to $TETHER_ARTIFACTS (or the test's
// temporary directory) and returns its path.
func (p *page) screenshot(name string) string {
	ctx, cancel := context.WithTimeout(p.ctx, wait)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	path := filepath.Join(p.dir, strings.NewReplacer("/", "_", " ", "_").Replace(p.t.Name()+"-"+name)+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.t.Errorf("screenshot: %v", err)
		return ""
	}
	p.t.Logf("screenshot: %s", path)
	return path
}
