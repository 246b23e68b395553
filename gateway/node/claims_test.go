package node_test

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/wal"
)

// The replicated journal's claims of one session on one node, driven
// directly (as the registry, an interrupt or a re-replication would): a
// claim's steps hold only if no other claim of the same session runs
// between them there, and an old claim's release must not end a newer
// one. The safety test that found this (cmd/tether's partition tests) lost
// two entries a client had been shown: two claims on the owner, one
// pulled a shorter copy over the entries the other had just loaded.

// journalSession creates a session on its owner through the journal and
// releases the claim the creation made; it returns the owner.
func journalSession(t *testing.T, c *tcluster) (*tnode, string) {
	t.Helper()
	sid := rand.Text()
	n := owner(t, sid, c.nodes...)
	now := time.Now()
	var h wal.Header
	err := untilAvailable(func() (err error) {
		h, err = n.Cluster.Journal().Create(t.Context(), wal.Header{
			SessionID: sid, UserID: "alice", Status: wal.StatusActive, CreatedAt: now, LastActiveAt: now,
		}, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Cluster.Journal().Release(t.Context(), sid, h.Epoch); err != nil {
		t.Fatal(err)
	}
	return n, sid
}

// untilAvailable runs try again while it fails with unavailable (under
// load a node can miss its Raft leader's heartbeat for a moment; a client
// or the registry retries then too), for up to waitFor.
func untilAvailable(try func() error) error {
	for deadline := time.Now().Add(waitFor); ; {
		err := try()
		if !errors.Is(err, cluster.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // a retry's backoff
	}
}

// Two claims of one session started at once on its owner take turns: each
// gets an epoch of its own. At once, both read the same epoch from the
// local copy, both fence with it (a fence by the same owner at the same
// epoch passes), and both believe they own the session under it.
func TestClaimsOfOneSessionTakeTurns(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, opts{})
	n, sid := journalSession(t, c)
	j := n.Cluster.Journal()
	for round := range 5 {
		epochs := make([]uint64, 2)
		err := untilAvailable(func() error {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := j.Claim(t.Context(), sid)
					epochs[i], errs[i] = d.Header.Epoch, err
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err == nil {
					defer func() { _ = j.Release(t.Context(), sid, epochs[i]) }()
				}
			}
			return errors.Join(errs...)
		})
		if err != nil {
			t.Fatalf("round %d: claim: %v", round, err)
		}
		if epochs[0] == epochs[1] {
			t.Fatalf("round %d: both claims hold epoch %d", round, epochs[0])
		}
	}
}

// The release of an older claim (its actor ending after the next claim
// started) leaves the newer claim replicating: its appends still reach
// every replica.
func TestReleaseOfAnOlderClaimKeepsTheNewer(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, opts{})
	n, sid := journalSession(t, c)
	j := n.Cluster.Journal()
	var seq uint64
	err := untilAvailable(func() error {
		old, err := j.Claim(t.Context(), sid)
		if err != nil {
			return err
		}
		cur, err := j.Claim(t.Context(), sid)
		if err != nil {
			return err
		}
		if err := j.Release(t.Context(), sid, old.Header.Epoch); err != nil {
			return err
		}
		now := time.Now()
		h := cur.Header
		seq = h.LastSeq + 1 // 1, or 2 when a try before failed to replicate it
		h.LastSeq, h.LastActiveAt = seq, now
		b := &wal.Batch{SessionID: sid, Epoch: cur.Header.Epoch, Header: h, Entries: []wal.Entry{
			{Seq: seq, Role: "user", Content: "after the old claim's release", Time: float64(now.UnixMicro()) / 1e6},
		}}
		done := make(chan error, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := j.AppendAsync(ctx, b, func(err error) { done <- err }); err != nil {
			return err
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return errors.New("the append under the newer claim was never answered")
		}
	})
	if err != nil {
		t.Fatalf("append under the newer claim: %v", err)
	}
	// Done means stored on every replica: R copies hold the entry.
	copies := 0
	for _, m := range c.nodes {
		if hd, ok := header(m, sid); ok && hd.LastSeq == seq {
			copies++
		}
	}
	if r := n.Cluster.Configuration().Replicas; copies != r {
		t.Fatalf("%d copies hold the entry, want %d", copies, r)
	}
}

// A session nothing has been written to yet is claimed after the node
// that started the cluster is gone. That node was the only member of the
// first configuration; a claim covers every configuration since the
// newest a copy was written or settled under, and a new session's copy,
// written under none, was taken to date from the first — whose only
// member no longer answers. The session was unavailable for good (its
// owner, its re-replication and every client's resume all failed so).
// No copy of it can exist before the configuration it was created under.
func TestUnwrittenSessionOutlivesTheFirstNode(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, opts{})
	first := c.nodes[0] // the kit starts it alone: the first configuration's only member
	after := placementWithout(c, first)
	var n *tnode
	var sid string
	for range 50 { // a session with a copy on first, owned by another node before and after first leaves
		n, sid = journalSession(t, c)
		if _, held := header(first, sid); held && n != first && after.Owner(sid) == n.id {
			break
		}
		n = nil
	}
	if n == nil {
		t.Fatal("no session of 50 had a copy on the first node without being its")
	}
	c.stop(first)
	err := untilAvailable(func() error {
		d, err := n.Cluster.Journal().Claim(t.Context(), sid)
		if err == nil {
			_ = n.Cluster.Journal().Release(t.Context(), sid, d.Header.Epoch)
		}
		return err
	})
	if err != nil {
		t.Fatalf("claim %s on %s after %s left: %v", sid, n.id, first.id, err)
	}
}
