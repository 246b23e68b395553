package web_test

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// demoFlags start a node as `make run` does, with a quick search tool.
var demoFlags = []string{"--dev-tokens", "--agent", "demo", "--demo-search-delay", "300ms"}

// TestServesModule: every node serves tether.js and tether-ai.js as JavaScript and the page as HTML.
func TestServesModule(t *testing.T) {
	s := startServer(t, demoFlags...)
	for _, c := range []struct{ path, ctype, body string }{
		{"/tether.js", "text/javascript", "export class Tether"},
		{"/tether-ai.js", "text/javascript", "export class TetherChatTransport"},
		{"/", "text/html", `import { Tether } from "/tether.js"`},
	} {
		resp, err := httpClient().Get(s.url(c.path))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) {
			t.Errorf("GET %s: HTTP %d, Content-Type %q; want 200, %s", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.ctype)
		}
		if !strings.Contains(string(body), c.body) {
			t.Errorf("GET %s: body lacks %q", c.path, c.body)
		}
	}
}

// TestChat: a message typed and sent with Enter shows as a user entry, the
// demo agent's tool run and reply follow, each with data-seq in order.
func TestChat(t *testing.T) {
	needBrowser(t)
	s := startServer(t, demoFlags...)
	p := openPage(t, s.url("/?user=alice"))
	p.waitState("live")
	p.typeAndEnter("compare two laptops")
	p.waitEntry("user", "compare two laptops")
	p.waitEntry("tool", "search")
	p.waitEntry("agent", `I searched for "compare two laptops"`)
	p.do("click #send", chromedp.Click(chromedp.ID("send"))) // an empty input sends nothing
	p.sendValue("and which is lighter?")
	p.waitEntry("agent", `I searched for "and which is lighter?"`)

	es := p.entries()
	checkOrder(t, es)
	roles := make([]string, len(es))
	for i, e := range es {
		roles[i] = e.Role
	}
	if got, want := strings.Join(roles, " "), "user tool tool agent user tool tool agent"; got != want {
		t.Errorf("roles in #log: %s; want %s", got, want)
	}
	if n := p.countText("compare two laptops"); n != 4 { // user, tool started, tool completed, agent
		t.Errorf("%d #log elements mention the first message, want 4", n)
	}
	path := p.screenshot("chat")
	if os.Getenv("TETHER_UPDATE_SCREENSHOT") == "1" && path != "" {
		b, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile("screenshot.png", b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestBlackhole: the connection goes silent (a proxy stops forwarding both
// ways and closes nothing). The page notices within 15 s by its heartbeat
// and resumes; a message typed during a second outage is noticed by its
// missing ack, delivered after the resume, and stored exactly once.
func TestBlackhole(t *testing.T) {
	needBrowser(t)
	s := startServer(t, demoFlags...)
	px := newProxy(t, s.addr)
	p := openPage(t, px.url("/?user=bob"))
	p.waitState("live")
	p.typeAndEnter("first")
	p.waitEntry("agent", `"first"`)
	p.recordStates()

	// 1. Idle: only the heartbeat can notice.
	start := time.Now()
	px.blackhole()
	noticed, resumed := p.waitLossAndResume(start)
	t.Logf("idle blackhole: noticed after %v, resumed after %v", noticed, resumed)
	if noticed > 15*time.Second+slack {
		t.Errorf("a silent connection was noticed after %v; want within 15 s", noticed)
	}

	// 2. A message typed into the silence.
	p.recordStates()
	start = time.Now()
	px.blackhole()
	p.typeAndEnter("typed during the outage")
	p.waitJS("the message shown as pending", `document.querySelector("#log > [data-send=pending]")?.textContent.includes("typed during the outage")`)
	noticed, resumed = p.waitLossAndResume(start)
	t.Logf("blackhole with a send: noticed after %v, resumed after %v", noticed, resumed)
	if noticed > 15*time.Second+slack {
		t.Errorf("a silent connection with an unacked send was noticed after %v; want within 15 s", noticed)
	}
	p.waitEntry("user", "typed during the outage")
	p.waitEntry("agent", `"typed during the outage"`)
	p.screenshot("resumed")

	if n := p.countText("typed during the outage"); n != 4 {
		t.Errorf("%d #log elements mention the message, want 4 (user, tool ×2, agent)", n)
	}
	checkOrder(t, p.entries())
	tok := s.devToken("bob")
	var sid string
	p.eval(`window.tether.sessionId`, &sid)
	if n := s.countStored(tok, sid, "typed during the outage"); n != 1 {
		t.Errorf("the server stored the message %d times, want 1", n)
	}
}

// slack is what a loaded machine may add to a bound the client keeps.
const slack = 3 * time.Second

// waitLossAndResume waits until #status went from live to reconnecting and
// back to live with "resumed"; it returns how long after start each happened.
func (p *page) waitLossAndResume(start time.Time) (noticed, resumed time.Duration) {
	p.t.Helper()
	p.waitJSFor("the loss to be noticed and the session resumed", `(() => {
		const s = window.__states, i = s.findIndex(x => x.state === "reconnecting");
		return i >= 0 && s.slice(i).some(x => x.state === "live" && x.text.includes("resumed"));
	})()`, 40*time.Second)
	var lost, back int64
	for _, c := range p.states() {
		if lost == 0 && c.State == "reconnecting" {
			lost = c.At
		}
		if lost != 0 && back == 0 && c.State == "live" && strings.Contains(c.Text, "resumed") {
			back = c.At
		}
	}
	return time.UnixMilli(lost).Sub(start), time.UnixMilli(back).Sub(start)
}

// TestStreaming: a streamed reply grows in #log as its deltas come (each
// text shown a prefix of the final reply), the final entry replaces it,
// and a drop in the middle of the stream resumes to the same final reply,
// once. It needs a node whose demo engine streams (--demo-stream-delay).
func TestStreaming(t *testing.T) {
	needBrowser(t)
	s, err := tryServer(t, append(demoFlags, "--demo-stream-delay", "150ms")...)
	if err != nil {
		if strings.Contains(err.Error(), "flag provided but not defined") {
			t.Skip("this tether has no streamed replies yet (no --demo-stream-delay)")
		}
		t.Fatal(err)
	}
	p := openPage(t, s.url("/?user=kim"))
	p.waitState("live")
	p.eval(`(() => {
		window.__stream = [];
		new MutationObserver(() => {
			const e = document.querySelector("#log > .streaming .body");
			if (e && window.__stream[window.__stream.length - 1] !== e.textContent) window.__stream.push(e.textContent);
		}).observe(document.querySelector("#log"), {childList: true, subtree: true, characterData: true});
		return 1;
	})()`, nil)
	p.typeAndEnter("stream me a reply")
	p.waitEntry("agent", `"stream me a reply"`)
	var seen []string
	p.eval(`window.__stream`, &seen)
	var final string
	p.eval(`document.querySelector("#log > [data-role=agent]").querySelector(".body").textContent`, &final)
	if len(seen) < 2 {
		t.Errorf("the reply was shown %d times while streaming, want it to grow: %q", len(seen), seen)
	}
	for _, part := range seen {
		if !strings.HasPrefix(final, part) {
			t.Errorf("streamed text %q is not a prefix of the reply %q", part, final)
		}
	}

	// Drop while the reply streams.
	p.recordStates()
	p.typeAndEnter("and once more")
	p.waitJS("the second reply to stream", `(document.querySelector("#log > .streaming .body")?.textContent || "").length > 0`)
	start := time.Now()
	p.do("click #drop", chromedp.Click(chromedp.ID("drop")))
	p.waitLossAndResume(start)
	p.waitEntry("agent", `"and once more"`)
	p.waitJS("no streamed reply left over", `!document.querySelector("#log > .streaming")`)
	var replies int
	p.eval(`Array.from(document.querySelectorAll("#log > [data-role=agent], #log > .streaming")).filter(e => e.textContent.includes('"and once more"')).length`, &replies)
	if replies != 1 {
		t.Errorf("the second reply is shown %d times, want once", replies)
	}
	checkOrder(t, p.entries())
}
