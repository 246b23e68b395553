package main

// A node of a cluster is SIGKILLed with sessions spread over all three,
// acked entries in each, tool calls in flight and clients attached
// through other gateways; then two nodes of five die in a row.

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestClusterOwnerCrash: every session resumes through the survivors
// with every acked entry and no seq twice, new sends work, the tool call
// the dead node was running ends once (failed: the demo's search is not
// idempotent), and the new owners already held the logs (no pull: a
// session's next owner is one of its replicas). The time from the kill
// to the first resume of a session the dead node owned is logged (the
// README reports it).
func TestClusterOwnerCrash(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 2, "--agent", "demo", "--demo-search-delay", "1500ms")
	const victim = 1
	place := c.placement()
	owned := func(s *psession) bool { return place.Owner(s.sid) == c.ids[victim] }

	// Sessions created through each node in turn, until the victim owns
	// two with their client on another node and one with its client on it
	// (once the rest are there, only through the victim: each session
	// costs the phases below a turn).
	var ss []*psession
	remote, direct := 0, 0
	for i := 0; remote < 2 || direct < 1 || len(ss) < 6; i++ {
		if i == 60 {
			t.Fatal("60 sessions and the victim does not own the ones needed")
		}
		via := i % 3
		if remote >= 2 && len(ss) >= 6 {
			via = victim
		}
		s := c.newSession(fmt.Sprintf("user-%d", i), via)
		switch {
		case owned(s) && s.via == victim:
			direct++
		case owned(s):
			remote++
		}
		ss = append(ss, s)
	}
	// Acked entries in each (the turns run at once on their owners).
	seqs := make([]uint64, len(ss))
	for i, s := range ss {
		seqs[i] = s.send(false)
	}
	for i, s := range ss {
		s.reply(seqs[i])
	}
	// A tool call in flight in each, then the kill.
	for i, s := range ss {
		seqs[i] = s.send(true)
	}
	killed := c.kill9(victim)

	var first, all time.Duration
	for _, s := range ss { // the victim's sessions first: the figure is theirs
		if !owned(s) && s.via != victim {
			continue
		}
		code := s.closed()
		switch {
		case s.via == victim && code != -1 && code != 1006: // no close frame: the node died
			t.Errorf("%s: client on the killed node closed with %d", s.sid, code)
		case s.via != victim && code != 1012:
			t.Errorf("%s: client through %s of a session the killed node owned closed with %d, want 1012", s.sid, c.ids[s.via], code)
		}
		via := s.via
		if via == victim {
			via = (victim + 1) % 3
		}
		s.resume(via)
		if first == 0 && owned(s) {
			first = time.Since(killed)
		}
	}
	all = time.Since(killed)
	t.Logf("kill → first resume of a session the killed node owned: %v; all %d sessions attached again: %v (%d were the killed node's)",
		first.Round(time.Millisecond), len(ss), all.Round(time.Millisecond), remote+direct)

	t.Cleanup(func() {
		if t.Failed() {
			for _, i := range c.alive() {
				t.Logf("%s:\n%s", c.ids[i], c.procs[i].Stderr())
			}
		}
	})
	// The call in flight ended (completed, or failed on the killed node)
	// and the agent goes on: every session is sent one more message before
	// any answer is awaited, so that their turns (a search of 1.5 s each)
	// run at once.
	for i, s := range ss {
		s.reply(seqs[i])
		seqs[i] = s.send(false)
	}
	for i, s := range ss {
		s.reply(seqs[i])
	}
	c.waitMembers()
	for _, s := range ss {
		s.check(c.alive()[0])
	}
	if pulls := c.sum("tether_cluster_pulls_total"); pulls != 0 {
		t.Errorf("the survivors pulled %v logs: a new owner was not one of the session's replicas", pulls)
	}
}

// TestClusterTwoKills: five nodes keep three copies of each session; two
// of them are killed one right after the other, before the first failure
// is even detected (so nothing was re-replicated in between). Every
// session resumes through the three survivors with every acked entry,
// and takes new messages.
func TestClusterTwoKills(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 5, 3)
	var ss []*psession
	for i := range 10 {
		ss = append(ss, c.newSession(fmt.Sprintf("user-%d", i), i%5))
	}
	for range 3 {
		seqs := make([]uint64, len(ss))
		for i, s := range ss {
			seqs[i] = s.send(false)
		}
		for i, s := range ss {
			s.reply(seqs[i])
		}
	}
	// The owner of the first session and its first replica: the sessions
	// they share lose two of their three copies.
	place := c.placement()
	reps := place.Replicas(ss[0].sid, 3)
	a, b := c.index(reps[0]), c.index(reps[1])
	both := 0
	for _, s := range ss {
		r := place.Replicas(s.sid, 3)
		if slices.Contains(r, reps[0]) && slices.Contains(r, reps[1]) {
			both++
		}
	}
	killed := c.kill9(a)
	c.kill9(b)
	survivors := c.alive()
	for i, s := range ss {
		_ = s.cl.WS.Close() // every client reconnects, to a survivor
		s.resume(survivors[i%len(survivors)])
	}
	t.Logf("killed %s and %s (%d of %d sessions had copies on both); every session attached again %v after the first kill",
		c.ids[a], c.ids[b], both, len(ss), time.Since(killed).Round(time.Millisecond))
	for _, s := range ss {
		s.reply(s.send(false))
	}
	for _, s := range ss {
		s.check(survivors[0])
	}
}

// TestClusterSIGTERM: a node leaves gracefully while every session has a
// send in flight: it exits 0, its clients and the clients of its sessions
// on other nodes are told to reconnect (1012), every session resumes
// through the others (none is left behind), and a send written again
// with its id after the resume is stored once, next to every acked one.
func TestClusterSIGTERM(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 2)
	const leaving = 2
	place := c.placement()
	var ss []*psession
	remote, direct := 0, 0
	for i := 0; remote < 2 || direct < 1 || len(ss) < 6; i++ {
		if i == 60 {
			t.Fatal("60 sessions and the leaving node does not own the ones needed")
		}
		s := c.newSession(fmt.Sprintf("user-%d", i), i%3)
		if place.Owner(s.sid) == c.ids[leaving] {
			if s.via == leaving {
				direct++
			} else {
				remote++
			}
		}
		ss = append(ss, s)
	}
	for _, s := range ss {
		s.reply(s.send(false))
	}
	for _, s := range ss { // in flight at the SIGTERM
		s.cl.mustWrite(sendFrame("last", "one more"))
	}
	code, took := c.procs[leaving].term(30 * time.Second)
	c.dead[leaving] = true
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	t.Logf("the node left in %v; %d sessions, %d of them its own with a client there, %d through others", took.Round(time.Millisecond), len(ss), direct, remote)
	t.Log(c.procs[leaving].Stderr())
	for i, s := range ss {
		affected := s.via == leaving || place.Owner(s.sid) == c.ids[leaving]
		if affected {
			if code := s.closed(); code != 1012 {
				t.Errorf("%s (owner %s, via %s): closed with %d, want 1012", s.sid, place.Owner(s.sid), c.ids[s.via], code)
			}
			s.resume(c.alive()[i%2])
			s.cl.mustWrite(sendFrame("last", "one more")) // again, same id
		}
		ack := s.cl.until(20*time.Second, "ack of the last send", s.see, func(f frame) bool { return f.Type == "ack" && f.ID == "last" })
		s.reply(ack.Seq)
	}
	c.waitMembers()
	for _, s := range ss {
		s.check(c.alive()[0])
		n := 0
		for _, e := range s.log.bySeq {
			if e.Role == "user" && e.MD("id") == "last" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: the last send is stored %d times", s.sid, n)
		}
	}
}

// TestClusterRestartAfterCrash: a killed node comes back on its data
// while the node that took its sessions over still serves them. It must
// start (its boot recovery waits for the other node to let its sessions
// go), take them back with everything written meanwhile, and their
// clients, told to reconnect, resume with nothing lost.
func TestClusterRestartAfterCrash(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 2)
	const victim = 0
	place := c.placement()
	var ss []*psession
	for i := 0; len(ss) < 3; i++ {
		if i == 60 {
			t.Fatal("60 sessions and not 3 owned by the victim")
		}
		s := c.newSession(fmt.Sprintf("user-%d", i), 1+i%2)
		if place.Owner(s.sid) == c.ids[victim] {
			s.reply(s.send(false))
			ss = append(ss, s)
		}
	}
	c.kill9(victim)
	for _, s := range ss { // taken over, written, and still attached
		s.closed()
		s.resume(s.via)
		s.reply(s.send(false))
	}
	c.restart(victim)
	c.waitMembers()
	for _, s := range ss {
		if code := s.closed(); code != 1012 {
			t.Errorf("%s: closed with %d when its owner came back, want 1012", s.sid, code)
		}
		s.resume(s.via)
		s.reply(s.send(false))
		s.check(victim)
	}
}
