package main

import (
	"fmt"
	"testing"
)

// TestClusterWholeRestart: every node of a cluster dies at once (a power
// cut) with clients attached to sessions on all of them; the nodes come
// back, each booting while its peers are still down or booting,
// and every session resumes with every acked entry.
func TestClusterWholeRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 2)
	var ss []*psession
	for i := range 6 {
		s := c.newSession(fmt.Sprintf("user-%d", i), i%3)
		s.reply(s.send(false))
		ss = append(ss, s)
	}
	for i := range 3 {
		c.kill9(i)
	}
	for _, s := range ss {
		s.closed()
	}
	// All at once: each node must serve (its peers' recoveries need its
	// link) while its own recovery still waits on the others.
	c.restartAll(0, 1, 2)
	c.waitMembers()
	for i, s := range ss {
		s.resume((i + 1) % 3)
		s.reply(s.send(false))
		s.check((i + 2) % 3)
	}
}
