package cluster

import (
	"errors"
	"fmt"
	"maps"
	"slices"
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
	c := withHistory("a", map[uint64][]string{10: {"a", "b", "c"}, 20: {"a", "b", "c", "d"}, 30: {"a", "b", "c"}})
	f := c.cons.fsm
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

// A fence from a claim under a configuration that a newer one, held by
// the fenced node, gives to another owner is refused: the claimant read
// an old configuration (a node just woken from a pause can), and its
// cover would miss what the owner in between wrote. A claim that no newer
// configuration overtakes is fenced as before.
func TestFenceRefusedWhenOvertaken(t *testing.T) {
	c := withHistory("c", map[uint64][]string{10: {"a", "b", "c"}, 11: {"b", "c"}, 12: {"a", "b", "c"}})
	sid := ownedFirstAndLast(t, c, "a")
	for _, tc := range []struct {
		name  string
		under uint64
		want  uint64 // the overtaking configuration, 0 for none
	}{
		{"claimed under 10, 11 gave it to another", 10, 11},
		{"claimed under the newest", 12, 0},
		{"claimed under one this node has not heard of yet", 13, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, other := c.overtaken(sid, tc.under<<epochShift+1, "a")
			if n != tc.want || (n != 0) != (other != "") || other == "a" {
				t.Fatalf("overtaken = %d, %q; want configuration %d", n, other, tc.want)
			}
		})
	}
}

// ownedFirstAndLast finds a session that the first and the last of c's
// configurations both give to owner.
func ownedFirstAndLast(t *testing.T, c *Cluster, owner string) string {
	t.Helper()
	f := c.cons.fsm
	first, last := f.history[0], f.history[len(f.history)-1]
	for i := range 10000 {
		s := fmt.Sprintf("s%d", i)
		if f.placement(first).Owner(s) == owner && f.placement(last).Owner(s) == owner {
			return s
		}
	}
	t.Fatalf("no session %s owns under configurations %d and %d", owner, first.Number, last.Number)
	return ""
}

// withHistory is a Cluster of node self whose FSM holds the given
// configurations (number → members, R=2), oldest first.
func withHistory(self string, cfgs map[uint64][]string) *Cluster {
	c := &Cluster{cfg: Config{Self: NodeMeta{ID: self}}, cons: &consensus{fsm: newFSM(PlacementConfig{}, nil)}}
	for _, n := range slices.Sorted(maps.Keys(cfgs)) {
		ms := make([]NodeMeta, len(cfgs[n]))
		for i, id := range cfgs[n] {
			ms[i] = NodeMeta{ID: id}
		}
		c.cons.fsm.history = append(c.cons.fsm.history, Configuration{Number: n, Replicas: 2, Members: ms})
	}
	return c
}

// A resume refused for a last_seq beyond the owner's copy is final only
// when the refusing actor holds a claim no configuration overtook; an
// actor that let its claim go (stepping down after a move) may hold a
// stale memory, so its refusal is retried instead.
func TestResumeRefusalNeedsAProvenClaim(t *testing.T) {
	c := withHistory("a", map[uint64][]string{10: {"a", "b", "c"}, 11: {"b", "c"}, 12: {"a", "b", "c"}})
	sid := ownedFirstAndLast(t, c, "a")
	for _, tc := range []struct {
		name  string
		epoch uint64
		want  bool
	}{
		{"no claim held (stepping down)", 0, false},
		{"claimed under 10, another owned it under 11", 10<<epochShift + 1, false},
		{"claimed under the newest", 12 << epochShift, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.claimProven(sid, tc.epoch); got != tc.want {
				t.Fatalf("claimProven(%d) = %v, want %v", tc.epoch, got, tc.want)
			}
		})
	}
}
