package main

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"
)

// Writes go on for these long while a fault lasts. The issue's
// partition lasted 12 s; the other faults are shorter to keep the set
// quick (gossip declares a node dead in about a second here).
const (
	issuePartition = 12 * time.Second
	faultFor       = 8 * time.Second
	writePace      = 100 * time.Millisecond
	// linkDownBound is how long a client may be unable to write while
	// one node's link is down but its gossip is up: the leader's three
	// missed probes of that link (test timing: about 3 s), the append or
	// forward that gives up (ForwardFor, 3 s), the new owner's claim,
	// and the client's retry backoff.
	linkDownBound = 12 * time.Second
)

// partitioned runs the common shape: sessions on every node with acked
// sends, cut, clients writing through every node for d (each client
// through its own node only: it is on that node's side of the cut), heal,
// one more acked send each (writes work again, through any node), then
// every session read through every node.
func partitioned(t *testing.T, c *pcluster, sessions int, d time.Duration, cut func(ctx context.Context) error) {
	t.Helper()
	ss := clientsOnEveryNode(c, sessions, 2)
	ctx := context.Background()
	if err := cut(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		s.only(s.node())
	}
	writeAll(ss, d, writePace)
	if err := c.lab.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		s.setVias(s.node())
	}
	logWrites(t, ss)
	all := c.others()
	c.settle(all, 20*time.Second)
	sendEach(t, ss, 1, 30*time.Second)
	c.verify(ss, all, 20*time.Second)
}

// logWrites logs how many sends were acked and refused.
func logWrites(t *testing.T, ss []*sclient) {
	t.Helper()
	acked, refused := 0, 0
	for _, s := range ss {
		acked += s.acked()
		refused += s.refusals
	}
	t.Logf("%d sessions: %d sends acked so far, %d attempts refused or unanswered", len(ss), acked, refused)
}

// TestSafetyPartitionMinority (issue 15): node3 is cut off from node1
// and node2 for 12 s while clients write through all three; after the
// heal no session shows another entry at a seq than the one its client
// was acked for.
func TestSafetyPartitionMinority(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 3, replicas: 2})
	partitioned(t, c, 9, issuePartition, func(ctx context.Context) error { return c.lab.Isolate(ctx, 2) })
}

// TestSafetyPartitionFiveSplit: five nodes (three copies of each
// session) split three against two.
func TestSafetyPartitionFiveSplit(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 5, replicas: 3})
	partitioned(t, c, 10, faultFor, func(ctx context.Context) error {
		for _, a := range []int{0, 1, 2} {
			for _, b := range []int{3, 4} {
				if err := c.lab.Cut(ctx, a, b); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// TestSafetyPartitionOwnerIsolated: the node that owns the most of the
// sessions (by today's placement) is cut off from the others while their
// clients write through every node, the owner included.
func TestSafetyPartitionOwnerIsolated(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 3, replicas: 2})
	owner := -1
	partitioned(t, c, 9, faultFor, func(ctx context.Context) error {
		owner = c.busiestOwner()
		return c.lab.Isolate(ctx, owner)
	})
	t.Logf("isolated %s", c.ids[owner])
}

// busiestOwner is the node today's placement gives the most of the
// sessions created so far to. Which node owns a session is the
// cluster's business; the safety checks hold whichever node it is.
func (c *pcluster) busiestOwner() int {
	place := c.placement()
	count := make([]int, len(c.procs))
	for _, sid := range c.sids {
		count[c.index(place.Owner(sid))]++
	}
	return slices.Index(count, slices.Max(count))
}

// TestSafetyPartitionOneWay: node3's packets to node1 and node2 are
// dropped, theirs to node3 are not: node3 hears the others' gossip and
// believes them alive, they hear nothing from node3 (see bench/netns
// for what a one-way cut does to TCP).
func TestSafetyPartitionOneWay(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 3, replicas: 2})
	partitioned(t, c, 9, faultFor, func(ctx context.Context) error {
		for _, to := range []int{0, 1} {
			if err := c.lab.CutOneWay(ctx, 2, to); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestSafetyLinkDown: gossip and HTTP on two addresses of each node;
// node3's HTTP address (its clients' and the node link's) is cut from
// the others and theirs from it, while gossip still flows, so every node
// believes node3 alive. Clients (who reach every node, and move to the
// next one when refused) must be able to write again within
// linkDownBound, and nothing acked is lost.
func TestSafetyLinkDown(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 3, replicas: 2, splitAddrs: true})
	const x = 2
	ss := clientsOnEveryNode(c, 9, 2)
	ctx := context.Background()
	for _, j := range c.others(x) {
		if err := c.lab.Block(ctx, j, c.lab.AddrOf(x, 1)); err != nil {
			t.Fatal(err)
		}
		if err := c.lab.Block(ctx, x, c.lab.AddrOf(j, 1)); err != nil {
			t.Fatal(err)
		}
	}
	from := time.Now()
	writeAll(ss, issuePartition, writePace)
	to := time.Now()
	if err := c.lab.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	logWrites(t, ss)
	if n := c.members(0); n != 3 {
		t.Logf("node1 counted %d members with gossip up (the link was down)", n)
	}
	for _, s := range ss {
		if gap := s.maxAckGap(from, to); gap > linkDownBound {
			t.Errorf("%s (%s): no ack for %v while %s's link was down (bound %v)", s.name, s.sid, gap.Round(time.Millisecond), c.ids[x], linkDownBound)
		}
	}
	c.settle(c.others(), 20*time.Second)
	sendEach(t, ss, 1, 30*time.Second)
	c.verify(ss, c.others(), 20*time.Second)
}

// TestSafetyLinkBetweenTwo: the node link between two members is cut
// (HTTP addresses, both ways) while gossip flows and the Raft leader
// reaches both, so neither gossip nor the leader's probes see a fault.
// A session owned by one with its copy on the other could never be
// written again; the owner reports the replica to the leader, which
// leaves one of the two out of the next configuration. Writes must go on
// within linkDownBound, and nothing acked is lost.
func TestSafetyLinkBetweenTwo(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 3, replicas: 2, splitAddrs: true})
	ss := clientsOnEveryNode(c, 12, 2)
	leader := -1
	for i := range c.procs {
		if v, err := c.procs[i].metric("tether_cluster_raft_leader"); err == nil && v == 1 {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no node reports itself the Raft leader")
	}
	a, b := c.others(leader)[0], c.others(leader)[1]
	place := c.placement()
	pair := 0
	for _, sid := range c.sids {
		if r := place.Replicas(sid, 2); slices.Contains(r, c.ids[a]) && slices.Contains(r, c.ids[b]) {
			pair++
		}
	}
	// Placement decides which sessions the two hold together; twelve
	// can miss the pair (it happened). More sessions until one is theirs.
	for pair == 0 && len(ss) < 60 {
		s := c.newClient(fmt.Sprintf("user-%d", len(ss)), len(ss)%len(c.procs))
		sendEach(t, []*sclient{s}, 2, 20*time.Second)
		ss = append(ss, s)
		if r := place.Replicas(s.sid, 2); slices.Contains(r, c.ids[a]) && slices.Contains(r, c.ids[b]) {
			pair++
		}
	}
	if pair == 0 {
		t.Fatalf("no session of %d is held by %s and %s together: nothing to test", len(ss), c.ids[a], c.ids[b])
	}
	ctx := context.Background()
	if err := c.lab.Block(ctx, a, c.lab.AddrOf(b, 1)); err != nil {
		t.Fatal(err)
	}
	if err := c.lab.Block(ctx, b, c.lab.AddrOf(a, 1)); err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	writeAll(ss, issuePartition+4*time.Second, writePace)
	to := time.Now()
	if err := c.lab.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	logWrites(t, ss)
	for _, s := range ss {
		if gap := s.maxAckGap(from, to); gap > linkDownBound {
			t.Errorf("%s (%s): no ack for %v while the link %s-%s was down (bound %v)", s.name, s.sid, gap.Round(time.Millisecond), c.ids[a], c.ids[b], linkDownBound)
		}
	}
	reports, _ := c.procs[a].metric("tether_cluster_link_reports_total")
	more, _ := c.procs[b].metric("tether_cluster_link_reports_total")
	if reports+more == 0 {
		t.Errorf("neither %s nor %s reported the link to the leader (%d sessions held by both)", c.ids[a], c.ids[b], pair)
	}
	c.settle(c.others(), 40*time.Second)
	sendEach(t, ss, 1, 30*time.Second)
	c.verify(ss, c.others(), 20*time.Second)
}

// TestSafetyPausedNode: node1 is SIGSTOPped until the others declare it
// dead; its clients move to the others and write; node1 is SIGCONTed
// (it wakes with the view it had) and its clients come back to it at
// once. Then every client resumes with its newest last_seq through every
// node, and every session is read through every node.
func TestSafetyPausedNode(t *testing.T) {
	t.Parallel()
	c := startSafetyCluster(t, safetyOpts{nodes: 3, replicas: 2})
	const x = 0
	ss := clientsOnEveryNode(c, 9, 2)
	c.signal(x, syscall.SIGSTOP)
	for _, j := range c.others(x) {
		c.waitSeen(j, 2, 20*time.Second)
	}
	for i, s := range ss {
		rest := c.others(x)
		s.setVias(rest[i%2], rest[1-i%2])
	}
	writeAll(ss, 3*time.Second, writePace)
	c.signal(x, syscall.SIGCONT)
	for i, s := range ss {
		if i%3 == x {
			s.setVias(x)
		}
	}
	writeAll(ss, 3*time.Second, writePace)
	logWrites(t, ss)
	c.settle(c.others(), 20*time.Second)
	for _, s := range ss {
		s.resumeEverywhere(c.others(), 20*time.Second)
	}
	c.verify(ss, c.others(), 20*time.Second)
}
