package main

import (
	"fmt"
	"testing"
	"time"
)

// TestSafetySeedReturns (issue 15): the seed node (started without
// --join, the others joining it) is SIGKILLed; the sessions go on
// through the other two; the seed comes back on its data, as it was
// first started (no --join), and clients resume on it. Every send acked
// while it was down must still be at its seq, through every node.
func TestSafetySeedReturns(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 3, replicas: 2})
	const seed = 0
	var ss []*sclient
	for i := range 12 {
		ss = append(ss, c.newClient(fmt.Sprintf("user-%d", i), 1+i%2))
	}
	sendEach(t, ss, 3, 20*time.Second)
	c.kill9(seed)
	for _, s := range ss {
		s.setVias(s.node(), 3-s.node()) // node2 and node3 only
	}
	sendEach(t, ss, 3, 20*time.Second)
	// At once, as a client would: half of them come back through the
	// seed the moment it listens, whatever it knows of the others yet.
	c.relaunch(seed, false)
	var back []*sclient
	for i, s := range ss {
		if i%2 == 0 {
			s.only(seed)
			back = append(back, s)
		}
	}
	sendEach(t, back, 1, 10*time.Second)
	c.settle([]int{0, 1, 2}, 15*time.Second)
	c.verify(ss, []int{0, 1, 2}, 20*time.Second)
}

// TestSafetyStaggeredRestart: the whole cluster dies at once, then its
// nodes come back a few seconds apart in another order, none with
// --join (they were in the cluster: they must find it from their own
// state). Every session resumes and takes new sends; every acked send is
// at its seq through every node.
func TestSafetyStaggeredRestart(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 3, replicas: 2})
	ss := clientsOnEveryNode(c, 9, 3)
	for i := range 3 {
		c.kill9(i)
	}
	for _, i := range []int{2, 0, 1} {
		c.relaunch(i, false)
		time.Sleep(2 * time.Second) // the stagger is the scenario
	}
	c.settle([]int{0, 1, 2}, 15*time.Second)
	for i, s := range ss {
		s.setVias((i + 1) % 3)
	}
	sendEach(t, ss, 2, 20*time.Second)
	c.verify(ss, []int{0, 1, 2}, 20*time.Second)
}

// TestSafetyRestartOneNeverReturns: the whole cluster dies; two of the
// three nodes come back, a few seconds apart, without --join; the third
// never does. Every session is served by the two, with every acked send.
func TestSafetyRestartOneNeverReturns(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 3, replicas: 2})
	ss := clientsOnEveryNode(c, 9, 3)
	for i := range 3 {
		c.kill9(i)
	}
	c.relaunch(1, false)
	time.Sleep(2 * time.Second) // the stagger is the scenario
	c.relaunch(0, false)
	c.settle([]int{0, 1}, 15*time.Second)
	for i, s := range ss {
		s.setVias(i%2, 1-i%2)
	}
	sendEach(t, ss, 2, 20*time.Second)
	c.verify(ss, []int{0, 1}, 20*time.Second)
}

// TestSafetyLeaveThenCrash: four nodes; the sessions are written to and
// left idle (no client attached); one node leaves gracefully (SIGTERM,
// exit 0), and once the others count three members a second node is
// SIGKILLed. No session, idle or not, loses an acked send.
func TestSafetyLeaveThenCrash(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 4, replicas: 2})
	ss := clientsOnEveryNode(c, 12, 3)
	for _, s := range ss {
		s.drop() // idle
	}
	if code, took := c.procs[3].term(30 * time.Second); code != 0 {
		t.Errorf("%s exited %d after SIGTERM (%v)", c.ids[3], code, took)
	}
	c.dead[3] = true
	for _, i := range []int{0, 1, 2} {
		c.waitSeen(i, 3, 20*time.Second)
	}
	// R copies again: every survivor finished re-replicating for the
	// configuration without node4 (idle sessions are not written, so
	// only the background pass brings them onto their new write sets).
	for _, i := range []int{0, 1, 2} {
		c.waitRereplicated(i, 20*time.Second)
	}
	c.kill9(2)
	for i, s := range ss {
		s.setVias(i%2, 1-i%2)
	}
	sendEach(t, ss, 1, 20*time.Second)
	c.verify(ss, []int{0, 1}, 20*time.Second)
}

// clientsOnEveryNode creates n sessions through the nodes in turn and
// has each acked for sends messages.
func clientsOnEveryNode(c *pcluster, n, sends int) []*sclient {
	c.t.Helper()
	var ss []*sclient
	for i := range n {
		ss = append(ss, c.newClient(fmt.Sprintf("user-%d", i), i%len(c.procs)))
	}
	sendEach(c.t, ss, sends, 20*time.Second)
	return ss
}
