package web_test

// Steering a turn from the page: Stop (cancel) and Approve/Deny (approve).

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestStop: #stop mid-reply stops the turn; the words streamed so far stay
// as the turn's agent entry, marked cancelled (on the page and in the
// store), and the next message gets a whole reply.
func TestStop(t *testing.T) {
	needBrowser(t)
	s := startServer(t, append(demoFlags, "--demo-stream-delay", "150ms")...)
	p := openPage(t, s.url("/?user=gus"))
	p.waitState("live")
	p.waitJS("#stop disabled while no turn runs", `document.querySelector("#stop").disabled`)
	const msg = "stop me in the middle of this rather long reply"
	full := fmt.Sprintf("I searched for %q. Found 3 results for %q.", msg, msg)
	p.typeAndEnter(msg)
	p.waitJS("two words of the streamed reply", `(document.querySelector("#log > .streaming .body")?.textContent || "").split(" ").filter(Boolean).length >= 2`)
	p.waitJS("#stop enabled while the reply streams", `!document.querySelector("#stop").disabled`)
	p.do("click #stop", chromedp.Click(chromedp.ID("stop")))
	p.waitJS("the cancelled agent entry", `!!document.querySelector("#log > [data-seq][data-role=agent][data-cancelled=true]")`)
	p.waitJS("no streamed reply left over", `!document.querySelector("#log > .streaming")`)
	p.waitJS("#stop disabled once the turn ended", `document.querySelector("#stop").disabled`)
	var kept string
	p.eval(`document.querySelector("#log > [data-role=agent][data-cancelled=true] .body").textContent`, &kept)
	if kept == "" || !strings.HasPrefix(full, kept) || len(kept) >= len(full) {
		t.Errorf("the stopped reply shows %q; want a non-empty proper prefix of %q", kept, full)
	}
	p.screenshot("stopped")

	p.typeAndEnter("and now a whole reply")
	p.waitEntry("agent", `I searched for "and now a whole reply". Found 3 results`)
	es := p.entries()
	checkOrder(t, es)
	var cancelled int
	p.eval(`document.querySelectorAll("#log > [data-cancelled=true]").length`, &cancelled)
	if cancelled != 1 {
		t.Errorf("%d entries shown cancelled, want 1 (the second reply is whole)", cancelled)
	}

	var sid string
	p.eval(`window.tether.sessionId`, &sid)
	var stopped []entry
	for _, m := range s.snapshot(s.devToken("gus"), sid).Messages {
		if m.Role == "agent" && m.Metadata["cancelled"] == true {
			stopped = append(stopped, m)
		}
	}
	if len(stopped) != 1 || stopped[0].Content != kept {
		t.Errorf("stored cancelled agent entries %+v; want one holding %q", stopped, kept)
	}
}

// TestApprove: "book a room" makes the demo agent call its booking tool,
// which waits for approval: the tool entry shows Approve and Deny; after a
// reload (the page rebuilt from the log) they are there again; Approve runs
// the booking and the buttons go, for good (a second reload shows none). A
// second booking denied does not run.
func TestApprove(t *testing.T) {
	needBrowser(t)
	s := startServer(t, demoFlags...)
	p := openPage(t, s.url("/?user=hal"))
	p.waitState("live")
	p.typeAndEnter("book a room for two")
	const buttons = `!!document.querySelector('#log > [data-role=tool] button[data-approve]') && !!document.querySelector('#log > [data-role=tool] button[data-deny]')`
	p.waitJS("Approve and Deny on the waiting tool entry", buttons)
	var callID string
	p.eval(`document.querySelector("button[data-approve]").dataset.approve`, &callID)
	p.waitJS("#stop enabled while the call waits", `!document.querySelector("#stop").disabled`)

	p.reload()
	p.waitState("live")
	p.waitJS("the buttons again after the reload", buttons)
	var pending struct {
		CallID string `json:"call_id"`
		Status string `json:"status"`
	}
	p.eval(`window.tether.tool`, &pending)
	if pending.CallID != callID || pending.Status != "awaiting_approval" {
		t.Errorf("after the reload the pending call is %+v; want %s awaiting_approval", pending, callID)
	}
	p.waitJS("#activity to say the call waits", `document.querySelector("#activity").textContent.includes("approval")`)
	p.screenshot("awaiting-approval")

	p.do("click Approve", chromedp.Click(chromedp.CSS(`button[data-approve="`+callID+`"]`)))
	p.waitEntry("tool", "approved")
	p.waitJS("the buttons to go", `!document.querySelector("button[data-approve], button[data-deny]")`)
	p.waitEntry("tool", "completed")
	p.waitEntry("agent", `Booked: confirmation for "book a room for two"`)
	before := p.entries()
	checkOrder(t, before)

	p.reload()
	p.waitState("live")
	p.waitJS("the whole transcript after the reload", fmt.Sprintf(`document.querySelectorAll("#log > [data-seq]").length >= %d`, len(before)))
	if n := p.countButtons(); n != 0 {
		t.Errorf("%d approval buttons after a reload of a decided call, want none", n)
	}

	p.typeAndEnter("book a table too")
	p.waitJS("the second call's buttons", `!!document.querySelector('button[data-deny]:not([data-deny="`+callID+`"])')`)
	p.do("click Deny", chromedp.Click(chromedp.CSS(`button[data-deny]`)))
	p.waitEntry("tool", "denied")
	p.waitEntry("agent", `You declined the booking`)
	if n := p.countButtons(); n != 0 {
		t.Errorf("%d approval buttons after the denial, want none", n)
	}
	es := p.entries()
	checkOrder(t, es)
	var roles []string
	for _, e := range es {
		roles = append(roles, e.Role)
	}
	// user, awaiting, approved, started, completed, agent; user, awaiting, denied, agent
	if got, want := strings.Join(roles, " "), "user tool tool tool tool agent user tool tool agent"; got != want {
		t.Errorf("roles in #log: %s; want %s", got, want)
	}
}

func (p *page) countButtons() int {
	var n int
	p.eval(`document.querySelectorAll("button[data-approve], button[data-deny]").length`, &n)
	return n
}
