package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tether-dev/tether/wal"
)

// A replicator ships, and marks copies complete as of a configuration
// (wal.Header.Settled), only while its node has owned the session in every
// configuration since its claim. A node that lost the session and got it
// back without claiming again may miss entries the owner in between
// acknowledged; a copy it marked complete as of the newest configuration
// would make a later claim skip the write sets that hold them.
func TestShipUnderNeedsOwnershipThroughout(t *testing.T) {
	meta := func(ids ...string) []NodeMeta {
		ms := make([]NodeMeta, len(ids))
		for i, id := range ids {
			ms[i] = NodeMeta{ID: id}
		}
		return ms
	}
	c := &Cluster{cfg: Config{Self: NodeMeta{ID: "a"}}, cons: &consensus{fsm: newFSM(PlacementConfig{}, nil)}}
	f := c.cons.fsm
	f.history = []Configuration{
		{Number: 10, Replicas: 2, Members: meta("a", "b", "c")},
		{Number: 20, Replicas: 2, Members: meta("a", "b", "c", "d")},
		{Number: 30, Replicas: 2, Members: meta("a", "b", "c")},
	}
	// A session that a owns under 10 and 30 but not under 20.
	sid := ""
	for i := 0; i < 10000 && sid == ""; i++ {
		s := fmt.Sprintf("s%d", i)
		if f.placement(f.history[0]).Owner(s) == "a" && f.placement(f.history[1]).Owner(s) != "a" {
			sid = s
		}
	}
	if sid == "" {
		t.Fatal("no session moves away from a under configuration 20")
	}
	at := func(n int) {
		c.config, c.place = f.history[n], f.placement(f.history[n])
	}
	for _, tc := range []struct {
		name    string
		claim   uint64 // configuration claimed under
		applied int    // index of the newest applied configuration
		ok      bool
	}{
		{"owned since the claim", 10, 0, true},
		{"owned again, but another owner in between", 10, 2, false},
		{"claimed again under the newest", 30, 2, true},
		{"ownership lost", 10, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at(tc.applied)
			r := &replicator{c: c, sid: sid, epoch: tc.claim<<epochShift + 1}
			n, targets, err := r.shipUnder()
			if !tc.ok {
				if !errors.Is(err, wal.ErrStaleEpoch) {
					t.Fatalf("shipUnder = %d, %v, %v; want a stale epoch (the session moved on)", n, targets, err)
				}
				return
			}
			want := f.history[tc.applied]
			if err != nil || n != want.Number {
				t.Fatalf("shipUnder = %d, %v, %v; want configuration %d", n, targets, err, want.Number)
			}
			if len(targets) != want.Replicas-1 {
				t.Fatalf("targets %v, want the %d replicas but this node", targets, want.Replicas-1)
			}
			for _, id := range targets {
				if id == "a" {
					t.Fatalf("targets %v include this node", targets)
				}
			}
		})
	}
}
