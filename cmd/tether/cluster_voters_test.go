package main

import (
	"fmt"
	"testing"
	"time"
)

// Six members: five vote, the sixth does not. A voter that dies gives its
// vote to the sixth once gossip has not listed it for the leader's
// dead-voter time (10× its settle time), so the quorum rests on members
// that answer and a second failure can still be survived.
func TestDeadVoterReplacedByNonVoter(t *testing.T) {
	if testing.Short() {
		t.Skip("six serve processes")
	}
	c := startCluster(t, 6, 2)
	voters := func() (in, out []int) {
		for _, i := range c.alive() {
			v, err := c.procs[i].metric("tether_cluster_raft_voter")
			switch {
			case err != nil:
				return nil, nil
			case v == 1:
				in = append(in, i)
			default:
				out = append(out, i)
			}
		}
		return in, out
	}
	var standby int
	poll(t, 30*time.Second, "five voters and one non-voter", func() bool {
		in, out := voters()
		if len(in) == 5 && len(out) == 1 {
			standby = out[0]
			return true
		}
		return false
	})
	victim := -1
	for _, i := range c.alive() {
		if i != standby && c.procs[i].mustMetric("tether_cluster_raft_leader") == 0 {
			victim = i
			break
		}
	}
	c.kill9(victim)
	poll(t, 60*time.Second, fmt.Sprintf("node %d votes in place of killed node %d", standby, victim), func() bool {
		in, _ := voters()
		return len(in) == 5 && c.procs[standby].mustMetric("tether_cluster_raft_voter") == 1
	})
	// The five live voters commit configurations: the next one leaves the
	// dead member out, and every live node applies it.
	c.waitMembers()
}
