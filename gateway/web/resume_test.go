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
// resumes, closes the abandoned socket once the new one is live, and the
// turn's reply arrives once.
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
	p.recordSockets()
	start := time.Now()
	p.do("click #drop", chromedp.Click(chromedp.ID("drop")))
	_, resumed := p.waitLossAndResume(start)
	t.Logf("dropped and resumed in %v", resumed)
	p.waitEntry("agent", `"search while I drop"`)

	// The drop sent nothing: the page closed the abandoned socket only once
	// the new one had its session frame (a resume attaches shared, so the
	// server would otherwise keep the old socket too).
	var log []string
	p.eval(`window.__sockets`, &log)
	if len(log) < 2 || log[0] != "session on new" || log[1] != "close old" {
		t.Errorf("socket events after the drop: %q; want the new socket's session frame, then the old socket closed", log)
	}
	deadline := time.Now().Add(wait)
	for {
		client, server := old[0].Closes()
		if !client.IsZero() {
			if !server.IsZero() && server.Before(client) {
				t.Errorf("the server closed the abandoned socket (%v before the page), want it kept attached until the page closed it", client.Sub(server))
			}
			break
		}
		if !server.IsZero() {
			t.Fatalf("the server closed the abandoned socket before the page did")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never closed the abandoned socket")
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

// TestTwoTabs: a second tab on the same session attaches shared (the
// page always does): neither tab is superseded, both stay live, and what
// either one sends — and the agent's answer — shows in the other's #log
// as it happens, with no reload and no reconnect.
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
	a.typeAndEnter("again from the first tab")
	b.waitEntry("user", "again from the first tab")
	b.waitEntry("agent", `"again from the first tab"`)
	b.typeAndEnter("from the second tab")
	a.waitEntry("user", "from the second tab")
	a.waitEntry("agent", `"from the second tab"`)
	b.waitEntry("agent", `"from the second tab"`)
	for name, p := range map[string]*page{"first": a, "second": b} {
		if st := p.state(); st != "live" {
			t.Errorf("the %s tab is %s, want live: both tabs stay attached", name, st)
		}
	}
	if n := px.wsCount(); n != 2 {
		t.Errorf("%d WebSocket connections, want 2 (one per tab, neither replaced)", n)
	}
	ea, eb := a.entries(), b.entries()
	checkOrder(t, ea)
	checkOrder(t, eb)
	if len(ea) != 12 || len(eb) != 12 {
		t.Errorf("%d entries in the first tab and %d in the second, want 12 in each (three turns of four)", len(ea), len(eb))
	}
	for i := range min(len(ea), len(eb)) {
		if ea[i] != eb[i] {
			t.Errorf("entry %d: %+v in the first tab, %+v in the second", i, ea[i], eb[i])
		}
	}
	b.screenshot("second-tab")
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
