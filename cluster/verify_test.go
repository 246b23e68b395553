package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A leader that takes itself out of the Raft group (a node's Leave) must
// still answer the read indexes its peers ask it for, at once, and not
// hang them: with Raft's default it shut its Raft down on removal, and a
// VerifyLeader queued in the buffer Raft keeps for them was never
// answered (a stress run of make test hung for eight minutes in the
// leaving node's Close, waiting for the handler of a peer's read index).
func TestVerifyAfterTheLeaderRemovedItself(t *testing.T) {
	hl := hclog.NewNullLogger()
	ids := []string{"a", "b"}
	rafts := make([]*raft.Raft, len(ids))
	trans := make([]*raft.InmemTransport, len(ids))
	var servers []raft.Server
	for i, id := range ids {
		_, trans[i] = raft.NewInmemTransport(raft.ServerAddress(id))
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: trans[i].LocalAddr()})
	}
	trans[0].Connect(trans[1].LocalAddr(), trans[1])
	trans[1].Connect(trans[0].LocalAddr(), trans[0])
	for i, id := range ids {
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(raftConfig(id, TestTiming(), hl), newFSM(PlacementConfig{}, nil), store, store, raft.NewInmemSnapshotStore(), trans[i])
		if err != nil {
			t.Fatal(err)
		}
		rafts[i] = r
		t.Cleanup(func() { _ = r.Shutdown().Error() })
	}
	if err := rafts[0].BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	var leader *raft.Raft
	var self raft.ServerID
	for deadline := time.Now().Add(30 * time.Second); leader == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader in 30 s")
		}
		for i, r := range rafts {
			if r.State() == raft.Leader {
				leader, self = r, raft.ServerID(ids[i])
			}
		}
	}
	if err := leader.RemoveServer(self, 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	cs := &consensus{raft: leader}
	done := make(chan error, 1)
	go func() {
		var err error
		for range 50 { // each would pick the shut-down Raft's queue half the time
			if _, err = cs.verified(); err == nil {
				break
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a leader that left the group verified its leadership")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("VerifyLeader on a leader that left the group was never answered")
	}
}
