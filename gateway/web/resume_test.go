package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDrop: #drop abandons the socket mid-tool without a close handshake
// (the server hears no close from the page), the page reconnects and
// resumes, and the turn's reply arrives once.
func TestDrop(t *testing.T) {
	needBrowser(t)
	s := startServer(t, demoFlags...)
	px := newProxy(t, s.addr)
	p := openPage(t, px.url("/?user=carol"))
	p.waitState("live")
	p.typeAndEnter("search while I drop")
	p.waitEntry("tool", "started")
	old := px.wsLinks()
	if len(old) != 1 {
		t.Fatalf("%d WebSocket connections before the drop, want 1", len(old))
	}
	p.recordStates()
	start := time.Now()
	p.do("click #drop", chromedp.Click(chromedp.ID("drop")))
	_, resumed := p.waitLossAndResume(start)
	t.Logf("dropped and resumed in %v", resumed)
	p.waitEntry("agent", `"search while I drop"`)

	// The server closes the abandoned socket (4001, superseded by the
	// resume); the page sent no close frame before that.
	deadline := time.Now().Add(wait)
	for {
		client, server := old[0].Closes()
		if !server.IsZero() {
			if !client.IsZero() && client.Before(server) {
				t.Errorf("the page sent a close frame on drop (%v before the server's): a clean close, not a signal loss", server.Sub(client))
			}
			break
		}
		if !client.IsZero() {
			t.Fatalf("the page sent a close frame on the dropped socket and the server none")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never closed the abandoned socket")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
	if n := px.wsCount(); n != 2 {
		t.Errorf("%d WebSocket connections, want 2 (one drop, one reconnect)", n)
	}
	p.typeAndEnter("after the drop")
	p.waitEntry("agent", `"after the drop"`)
	es := p.entries()
	checkOrder(t, es)
	if len(es) != 8 {
		t.Errorf("%d entries, want 8 (two turns of four)", len(es))
	}
	p.screenshot("after-drop")
}

// TestReload: after a reload the page resumes the session it used and
// shows the whole transcript again (paged with history).
func TestReload(t *testing.T) {
	needBrowser(t)
	s := startServer(t, demoFlags...)
	p := openPage(t, s.url("/?user=dan"))
	p.waitState("live")
	p.typeAndEnter("one")
	p.waitEntry("agent", `"one"`)
	p.typeAndEnter("two")
	p.waitEntry("agent", `"two"`)
	before := p.entries()
	checkOrder(t, before)

	p.reload()
	p.waitState("live")
	p.waitJS("the whole transcript after the reload", fmt.Sprintf(`document.querySelectorAll("#log > [data-seq]").length >= %d`, len(before)))
	after := p.entries()
	checkOrder(t, after)
	if len(after) != len(before) {
		t.Fatalf("%d entries after the reload, want %d", len(after), len(before))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("entry %d: %+v after the reload, %+v before", i, after[i], before[i])
		}
	}
	p.waitJS("status to say resumed", `document.querySelector("#status").textContent.includes("resumed, 0 missed")`)
	p.typeAndEnter("three")
	p.waitEntry("agent", `"three"`)
	checkOrder(t, p.entries())
	p.screenshot("reloaded")
}

// TestSessionParam: ?session=ID shows a session of 150 entries, all of
// them, although one resume batch holds 50.
func TestSessionParam(t *testing.T) {
	needBrowser(t)
	s := startServer(t, "--dev-tokens", "--agent", "echo")
	tok := s.devToken("erin")
	msgs := make([]string, 75)
	for i := range msgs {
		msgs[i] = fmt.Sprintf("message %03d", i+1)
	}
	sid := s.seedSession(tok, msgs, 150)

	p := openPage(t, s.url("/?user=erin&session="+sid))
	p.waitJS("150 entries", `document.querySelectorAll("#log > [data-seq]").length >= 150`)
	p.waitJS("the status to count what was missed", `document.querySelector("#status").textContent.includes("resumed, 150 missed")`)
	es := p.entries()
	checkOrder(t, es)
	if len(es) != 150 {
		t.Fatalf("%d entries, want 150", len(es))
	}
	for i, m := range msgs {
		u, a := es[2*i], es[2*i+1]
		if u.Role != "user" || !strings.Contains(u.Text, m) || a.Role != "agent" || !strings.Contains(a.Text, "Agent reply: "+m) {
			t.Fatalf("entries %d,%d = %+v, %+v; want %q and its reply", u.Seq, a.Seq, u, a, m)
		}
	}
	p.screenshot("150")
}

// TestTwoTabs: a second tab resuming the same session supersedes the first
// (4001); the first goes offline and stays there — no fight — until the
// user reconnects it, which takes the session back.
func TestTwoTabs(t *testing.T) {
	needBrowser(t)
	s := startServer(t, demoFlags...)
	px := newProxy(t, s.addr)
	a := openPage(t, px.url("/?user=fay"))
	a.waitState("live")
	a.typeAndEnter("from the first tab")
	a.waitEntry("agent", `"from the first tab"`)

	b := a.newTab(px.url("/?user=fay")) // same browser: same localStorage, same session
	b.waitState("live")
	b.waitEntry("agent", `"from the first tab"`)
	a.waitState("offline")
	a.waitJS("the reason", `document.querySelector("#status").textContent.includes("another tab")`)
	b.typeAndEnter("from the second tab")
	b.waitEntry("agent", `"from the second tab"`)
	if st := a.state(); st != "offline" {
		t.Errorf("first tab is %s after the second took over, want offline", st)
	}
	if n := px.wsCount(); n != 2 {
		t.Errorf("%d WebSocket connections, want 2: the tabs must not fight", n)
	}

	a.do("click #reconnect", chromedp.Click(chromedp.ID("reconnect")))
	a.waitState("live")
	a.waitEntry("agent", `"from the second tab"`)
	b.waitState("offline")
	checkOrder(t, a.entries())
	a.screenshot("taken-back")
}

// TestRestart: the node shuts down (1012) and is away for a while; the page
// keeps retrying with a countdown, a message typed meanwhile waits as
// pending, and once the node is back (same data) the page resumes and the
// message is delivered once.
func TestRestart(t *testing.T) {
	needBrowser(t)
	data := t.TempDir()
	s := startServer(t, append(demoFlags, "--data", data)...)
	px := newProxy(t, s.addr)
	p := openPage(t, px.url("/?user=lee"))
	p.waitState("live")
	p.typeAndEnter("before the restart")
	p.waitEntry("agent", `"before the restart"`)

	s.stop()
	p.waitState("reconnecting")
	p.waitJS("a countdown to the next try", `/next try in \d+ s/.test(document.querySelector("#status").textContent)`)
	p.typeAndEnter("typed while the node is down")
	p.waitJS("the message shown as pending", `document.querySelector("#log > [data-send=pending]")?.textContent.includes("typed while the node is down")`)

	s2 := startServer(t, append(demoFlags, "--data", data)...)
	px.setTarget(s2.addr)
	p.waitJSFor("the page to resume", `document.querySelector("#status").dataset.state === "live" &&
		document.querySelector("#status").textContent.includes("resumed")`, 45*time.Second)
	p.waitEntry("agent", `"typed while the node is down"`)
	checkOrder(t, p.entries())
	var sid string
	p.eval(`window.tether.sessionId`, &sid)
	if n := s2.countStored(s2.devToken("lee"), sid, "typed while the node is down"); n != 1 {
		t.Errorf("the message was stored %d times, want 1", n)
	}
	p.screenshot("restarted")
}
