package cluster

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// Which member of a reported pair the leader ("a") leaves out of the next
// configuration.
func TestReportedOut(t *testing.T) {
	now := time.Unix(1000, 0)
	five := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		name    string
		members []string
		reports [][2]string // (from, about), heard now
		old     [][2]string // heard longer ago than the hold
		want    []string
	}{
		{"the replica a member cannot reach", five, [][2]string{{"b", "c"}}, nil, []string{"c"}},
		{"a cut both ways: one of the two", five, [][2]string{{"b", "c"}, {"c", "b"}}, nil, []string{"c"}},
		{"never the leader: the reporter instead", five, [][2]string{{"b", "a"}}, nil, []string{"b"}},
		{"a reporter of most of the others is the fault", five, [][2]string{{"b", "c"}, {"b", "d"}}, nil, []string{"b"}},
		{"two reports out of five members' four peers: still the reporter", five, [][2]string{{"b", "c"}, {"b", "e"}}, nil, []string{"b"}},
		{"one report of three peers", []string{"a", "b", "c"}, [][2]string{{"b", "c"}}, nil, []string{"c"}},
		{"an old report is forgotten", five, nil, [][2]string{{"b", "c"}}, nil},
		{"reports for less than the settle time count for nothing", five, nil, nil, nil},
		{"a member no longer in the configuration", []string{"a", "b"}, [][2]string{{"b", "c"}}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Cluster{cfg: Config{Self: NodeMeta{ID: "a"}, Timing: Timing{ProbeInterval: 100 * time.Millisecond, SuspicionMult: 2}}, reports: newReports()}
			c.reports.now = func() time.Time { return now }
			cs := &consensus{c: c, log: quiet}
			for _, p := range tc.reports {
				c.reports.held[p] = heardAt{first: now.Add(-cs.settle()), last: now}
			}
			for _, p := range tc.old {
				last := now.Add(-cs.reportHold() - time.Second)
				c.reports.held[p] = heardAt{first: last.Add(-cs.settle()), last: last}
			}
			c.reports.held[[2]string{"d", "e"}] = heardAt{first: now.Add(-cs.settle() / 2), last: now} // too short to count
			got := slices.Sorted(maps.Keys(cs.reportedOut(tc.members)))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("left out %v, want %v", got, tc.want)
			}
		})
	}
}
