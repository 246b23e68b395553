package cluster

import (
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"
)

// Raft's AppliedIndex runs ahead of the FSM: it counts entries handed to
// the FSM's goroutine. A node woken from a pause got configurations 11
// and 12 at once, saw AppliedIndex past them while its FSM still held 10,
// took 10 for the newest committed configuration, and refused a client's
// resume as beyond its copy (the bench's rare bad_request). fsmBehind
// tells whether a command up to an index is still on its way to the FSM.
func TestFSMBehindCountsCommandsNotIndexes(t *testing.T) {
	store, err := openRaftStore(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	cmd := func(i uint64, members ...string) *raft.Log {
		ms := make([]NodeMeta, len(members))
		for k, id := range members {
			ms[k] = NodeMeta{ID: id}
		}
		b, err := msgpack.Marshal(configCommand{Replicas: 2, Members: ms})
		if err != nil {
			t.Fatal(err)
		}
		return &raft.Log{Index: i, Type: raft.LogCommand, Data: b}
	}
	logs := []*raft.Log{
		cmd(10, "a", "b", "c"),
		{Index: 11, Type: raft.LogNoop},
		cmd(12, "a", "c"),
		{Index: 13, Type: raft.LogBarrier},
		{Index: 14, Type: raft.LogConfiguration},
		cmd(15, "a", "b", "c"),
	}
	if err := store.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	f := newFSM(PlacementConfig{}, nil)
	cs := &consensus{fsm: f, store: store}
	f.Apply(logs[0])

	check := func(index uint64, want bool) {
		t.Helper()
		got, err := cs.fsmBehind(index)
		if err != nil || got != want {
			t.Fatalf("FSM at %d: fsmBehind(%d) = %v, %v; want %v", f.current().Number, index, got, err, want)
		}
	}
	check(10, false)
	check(11, false) // a no-op: nothing for the FSM
	check(12, true)  // configuration 12 is on its way
	check(14, true)
	f.Apply(logs[2])
	check(12, false)
	check(14, false) // a barrier and a Raft membership change
	check(15, true)
	check(14, false) // the remembered range answers without a read
	f.Apply(logs[5])
	check(15, false)

	// Entries compacted into a snapshot are in the FSM.
	if err := store.DeleteRange(10, 15); err != nil {
		t.Fatal(err)
	}
	g := newFSM(PlacementConfig{}, nil)
	g.history = []Configuration{{Number: 15, Replicas: 2}}
	cs = &consensus{fsm: g, store: store}
	if err := store.StoreLogs([]*raft.Log{{Index: 16, Type: raft.LogNoop}}); err != nil {
		t.Fatal(err)
	}
	if behind, err := cs.fsmBehind(16); behind || err != nil {
		t.Fatalf("after compaction: fsmBehind(16) = %v, %v", behind, err)
	}
}
