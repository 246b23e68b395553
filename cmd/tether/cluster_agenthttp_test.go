package main

import (
	"fmt"
	"testing"
	"time"
)

// In a 3-node cluster, a turn of the HTTP agent goes on at the new owner
// after its owner is SIGKILLed mid-turn: the step is sent again with the
// same Idempotency-Key, and the reply is logged once, whole.
func TestClusterAgentHTTPFailover(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t, "")
	c := startCluster(t, 3, 2, "--agent", "http", "--agent-url", a.url(), "--agent-secret", agentTestSecret, "--stream-flush", "0")
	t.Cleanup(func() {
		if t.Failed() {
			for _, i := range c.alive() {
				t.Logf("%s:\n%s", c.ids[i], c.procs[i].Stderr())
			}
		}
	})
	const victim = 1
	place := c.placement()
	var s *psession
	for i := 0; s == nil; i++ {
		if i == 60 {
			t.Fatal("60 sessions and the victim owns none with its client elsewhere")
		}
		ns := c.newSession(fmt.Sprintf("user-%d", i), (victim+1+i%2)%3)
		if place.Owner(ns.sid) == c.ids[victim] {
			s = ns
		}
	}
	s.cl.mustWrite(sendFrame("r-1", "resume please"))
	ack := s.cl.until(20*time.Second, "ack", s.see, func(f frame) bool { return f.Type == "ack" && f.ID == "r-1" })
	s.cl.until(20*time.Second, "two parts", s.see, func(f frame) bool { return f.Type == "delta" && f.Part >= 1 })
	keys := func() (n int, most int) {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, v := range a.keys {
			n, most = n+1, max(most, v)
		}
		return n, most
	}
	if n, most := keys(); n != 1 || most != 1 {
		t.Fatalf("before the kill the endpoint saw %d keys, at most %d requests each", n, most)
	}
	c.kill9(victim)
	if code := s.closed(); code != 1012 {
		t.Fatalf("the client of the killed owner's session closed with %d, want 1012", code)
	}
	s.resume(s.via)
	// The new owner asks for the step again, with the same key.
	poll(t, 30*time.Second, "the step sent again", func() bool { _, most := keys(); return most == 2 })
	if n, _ := keys(); n != 1 {
		t.Fatalf("the step was sent again under %d keys", n)
	}
	a.releaseReply()
	s.reply(ack.Seq)
	var replies []frame
	for _, e := range s.log.bySeq {
		if e.Role == "agent" && replyTo(e) == ack.Seq {
			replies = append(replies, e)
		}
	}
	if len(replies) != 1 || replies[0].Content != "part0 part1 part2 part3" {
		t.Fatalf("the turn's replies: %v", replies)
	}
	s.check(c.alive()[0])
}
