package client

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway/faultnet"
)

// TestChatBlackhole: the network dies silently under the chat; a message
// typed during the outage is answered once the network is back, and the
// chat shows the loss and the return.
func TestChatBlackhole(t *testing.T) {
	n := newNode(t, nodeOpts{})
	p := newProxy(t, n.addr)
	tok := n.token(t, "alice", 0)
	r := startChat(t, ChatConfig{Client: Config{URLs: []string{p.URL()}, Token: tok,
		PingAfter: 200 * time.Millisecond, PongTimeout: 300 * time.Millisecond}})
	r.waitFor(`started`)
	r.typeLine("before")
	r.waitFor(`\[2\] agent: Agent reply: before`)
	p.Blackhole(faultnet.Refuse)
	r.typeLine("during the outage")
	r.waitFor(`connection lost \((the connection went silent|the server did not answer in time)[^)]*\); reconnecting…`)
	r.waitFor(`server unreachable at 127\.0\.0\.1:\d+ \([^)]+\), retrying in [0-9.]+s…`)
	p.SetMode(faultnet.Up)
	r.waitFor(`reconnected to \S+ after [0-9.]+m?s: session \w+ resumed`)
	r.waitFor(`\[4\] agent: Agent reply: during the outage`)
	r.typeLine("/quit")
	if err := r.wait(); err != nil {
		t.Fatal(err)
	}
	if k := strings.Count(r.out.String(), "] user: during the outage"); k != 1 {
		t.Fatalf("the outage message shown %d times:\n%s", k, r.out.String())
	}
	sid := r.waitFor(`left session \w+`)[len("left session "):]
	fresh := dial(t, Config{URLs: []string{n.url()}, Token: tok, SessionID: sid})
	all := collect(t, fresh, 4)
	contiguous(t, all, 1)
	if all[2].Content != "during the outage" || all[3].Content != "Agent reply: during the outage" {
		t.Fatalf("server log %+v", all)
	}
	if last := n.snapshot(t, sid, tok).LastSeq; last != 4 {
		t.Fatalf("server last_seq %d, want 4", last)
	}
}

// TestChatServerDown: while no server answers, the chat says so and when
// it retries, never that it is connected; once one answers it connects,
// and what was typed meanwhile is sent.
func TestChatServerDown(t *testing.T) {
	n := newNode(t, nodeOpts{})
	p := newProxy(t, n.addr)
	p.SetMode(faultnet.Refuse)
	r := startChat(t, ChatConfig{Client: Config{URLs: []string{p.URL()}, Token: n.token(t, "alice", 0),
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}})
	r.waitFor(`server unreachable at 127\.0\.0\.1:\d+ \([^)]+\), retrying in [0-9.]+s…`)
	r.typeLine("typed while down")
	r.waitFor(`not connected: what you type is queued`)
	if strings.Contains(r.out.String(), "connected to") {
		t.Fatalf("said connected while down:\n%s", r.out.String())
	}
	p.SetMode(faultnet.Up)
	r.waitFor(`connected to \S+: session \w+ started`)
	r.waitFor(`\[2\] agent: Agent reply: typed while down`)
}

// TestChatLiveCountdown: on a terminal the countdown is redrawn in place.
func TestChatLiveCountdown(t *testing.T) {
	n := newNode(t, nodeOpts{})
	p := newProxy(t, n.addr)
	p.SetMode(faultnet.Refuse)
	r := startChat(t, ChatConfig{Live: true, Client: Config{URLs: []string{p.URL()}, Token: n.token(t, "alice", 0),
		MinBackoff: 1200 * time.Millisecond, MaxBackoff: 2400 * time.Millisecond}})
	r.waitFor(`server unreachable at 127\.0\.0\.1:\d+ \([^)]+\), retrying in \d+s…\r\x1b\[Kserver unreachable at 127\.0\.0\.1:\d+ \([^)]+\), retrying in \d+s…`)
	p.SetMode(faultnet.Up)
	r.waitFor(`\nconnected to`)
}
