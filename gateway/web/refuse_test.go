package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestOversized: a message over --max-content is refused by the server
// (too_large, the connection stays); one over --max-frame makes the server
// close with 1009 and is refused, with exactly one reconnect; one over the
// page's own frame limit is refused without being sent. None is resent,
// each is shown once as refused, and the chat goes on.
func TestOversized(t *testing.T) {
	needBrowser(t)
	s := startServer(t, append(demoFlags, "--max-frame", "4096", "--max-content", "2048")...)
	px := newProxy(t, s.addr)
	p := openPage(t, px.url("/?user=gus"))
	p.waitState("live")
	sockets := px.wsCount()

	refused := func(n int) {
		t.Helper()
		p.waitJS(fmt.Sprintf("%d refused messages", n), fmt.Sprintf(`document.querySelectorAll("#log > [data-send=refused]").length === %d`, n))
	}
	overContent := strings.Repeat("a", 3000)
	p.sendValue(overContent)
	refused(1)
	p.waitJS("the refusal to name too_large", `document.querySelector("#log > [data-send=refused]").textContent.includes("too_large")`)
	if n := px.wsCount(); n != sockets {
		t.Errorf("%d WebSocket connections after a too_large send, want %d (no reconnect)", n, sockets)
	}

	overFrame := strings.Repeat("b", 10000)
	p.sendValue(overFrame)
	refused(2)
	p.waitState("live")

	overPageLimit := strings.Repeat("c", 70000)
	p.sendValue(overPageLimit)
	refused(3)

	// A normal message goes through, and by then nothing was looping.
	p.typeAndEnter("a small one")
	p.waitEntry("agent", `"a small one"`)
	if n := px.wsCount(); n != sockets+1 {
		t.Errorf("%d WebSocket connections, want %d: one reconnect after the 1009, none else", n, sockets+1)
	}
	for _, big := range []string{overContent, overFrame, overPageLimit} {
		if n := p.countText(big); n != 1 {
			t.Errorf("a %d-byte message is shown %d times, want once", len(big), n)
		}
	}
	var sid string
	p.eval(`window.tether.sessionId`, &sid)
	for _, m := range s.snapshot(s.devToken("gus"), sid).Messages {
		if m.Role == "user" && len(m.Content) > 2048 {
			t.Errorf("the server stored a %d-byte message", len(m.Content))
		}
	}
	checkOrder(t, p.entries())
	p.screenshot("refused")
}

// TestRateLimited: a burst over --rate gets rate_limited answers; the page
// waits and resends, and every message is stored once, in order.
func TestRateLimited(t *testing.T) {
	needBrowser(t)
	s := startServer(t, "--dev-tokens", "--agent", "echo", "--rate", "1")
	p := openPage(t, s.url("/?user=hal"))
	p.waitState("live")
	p.eval(`(window.__errors = [], window.tether.on("error", e => window.__errors.push(e.code)), 1)`, nil)
	const n = 5
	p.eval(fmt.Sprintf(`(() => {
		for (let i = 1; i <= %d; i++) {
			document.querySelector("#input").value = "burst " + i;
			document.querySelector("#send").click();
		}
		return 1;
	})()`, n), nil)
	p.waitJS("every reply", fmt.Sprintf(`document.querySelectorAll('#log > [data-role=agent]').length === %d`, n))
	var errs []string
	p.eval(`window.__errors`, &errs)
	if !strings.Contains(strings.Join(errs, " "), "rate_limited") {
		t.Errorf("no rate_limited error came (errors: %v): the test did not test", errs)
	}
	es := p.entries()
	checkOrder(t, es)
	var users []string
	for _, e := range es {
		if e.Role == "user" {
			users = append(users, e.Text)
		}
	}
	if len(users) != n {
		t.Fatalf("%d user entries, want %d", len(users), n)
	}
	tok := s.devToken("hal")
	var sid string
	p.eval(`window.tether.sessionId`, &sid)
	for i, u := range users {
		want := fmt.Sprintf("burst %d", i+1)
		if !strings.HasSuffix(u, want) {
			t.Errorf("user entry %d is %q, want %q (in order)", i, u, want)
		}
		if c := s.countStored(tok, sid, want); c != 1 {
			t.Errorf("%q stored %d times, want 1", want, c)
		}
	}
	p.screenshot("rate-limited")
}

// TestToken: without --dev-tokens the page explains how to get a token;
// ?token= works; a refused token stops the page instead of looping.
func TestToken(t *testing.T) {
	needBrowser(t)
	const secret = "browser-test-secret"
	s := startServer(t, "--jwt-secret", secret, "--agent", "demo", "--demo-search-delay", "300ms")
	p := openPage(t, s.url("/?user=ivy"))
	p.waitState("offline")
	p.waitJS("the explanation", `!document.querySelector("#banner").hidden &&
		document.querySelector("#banner").textContent.includes("tether token --user ivy --secret S") &&
		document.querySelector("#banner").textContent.includes("?token=")`)
	p.screenshot("no-dev-tokens")

	tok := mintToken(t, "ivy", secret)
	p.navigate(s.url("/?token=" + tok))
	p.waitState("live")
	p.typeAndEnter("hello with a token")
	p.waitEntry("agent", `"hello with a token"`)

	p.navigate(s.url("/?token=" + mintToken(t, "ivy", "another-secret")))
	p.waitState("offline")
	p.waitJS("the reason", `document.querySelector("#status").textContent.includes("token was refused")`)
}

// TestExpired: a session that cannot be resumed shows "expired" and offers
// a new session, which then works.
func TestExpired(t *testing.T) {
	needBrowser(t)
	s := startServer(t, demoFlags...)
	p := openPage(t, s.url("/?user=jo&session=no-such-session"))
	p.waitState("expired")
	p.waitJS("the offer of a new session", `Array.from(document.querySelectorAll("#banner button")).some(b => b.textContent.includes("new session"))`)
	p.screenshot("expired")
	p.eval(`(Array.from(document.querySelectorAll("#banner button")).find(b => b.textContent.includes("new session")).click(), 1)`, nil)
	p.waitState("live")
	p.typeAndEnter("fresh start")
	p.waitEntry("agent", `"fresh start"`)
	var loc string
	p.eval(`location.search`, &loc)
	if strings.Contains(loc, "session=") {
		t.Errorf("the URL still names the old session: %s", loc)
	}
}

// TestReauth: a session made sensitive (the demo payment tool) cannot be
// resumed with a token whose login is old: the server closes with 4003,
// the page goes offline and says how to log in again instead of retrying,
// and a fresh token resumes it.
func TestReauth(t *testing.T) {
	needBrowser(t)
	const secret = "reauth-test-secret"
	s := startServer(t, "--jwt-secret", secret, "--agent", "demo", "--demo-search-delay", "300ms")
	old := mintToken(t, "max", secret, "--auth-age", "10m") // logged in 10 min ago; --reauth-max-age is 5m
	p := openPage(t, s.url("/?token="+old))
	p.waitState("live")
	p.typeAndEnter("pay the invoice")
	p.waitEntry("agent", "Payment done")

	p.do("click #drop", chromedp.Click(chromedp.ID("drop")))
	p.waitState("offline")
	p.waitJS("how to log in again", `!document.querySelector("#banner").hidden &&
		document.querySelector("#banner").textContent.includes("--auth-age 0s")`)
	p.screenshot("reauth")

	p.navigate(s.url("/?token=" + mintToken(t, "max", secret)))
	p.waitState("live")
	p.waitJS("the resumed transcript", `document.querySelector("#status").textContent.includes("resumed") &&
		document.querySelectorAll("#log > [data-seq]").length === 4`)
	checkOrder(t, p.entries())
}
