package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/cluster/clustertest"
)

type gossipNode struct {
	*Membership
	ft *clustertest.FaultyTransport
}

type nodeOpts struct {
	secret   string
	log      *slog.Logger
	onChange func([]Member)
}

// startGossip starts a member with TestTiming on 127.0.0.1 (ephemeral
// port) behind a FaultyTransport; the test's cleanup closes it.
func startGossip(t *testing.T, id string, seeds []string, o nodeOpts) *gossipNode {
	t.Helper()
	m, ft, err := newGossip(id, seeds, o)
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &gossipNode{Membership: m, ft: ft}
}

func newGossip(id string, seeds []string, o nodeOpts) (*Membership, *clustertest.FaultyTransport, error) {
	if o.log == nil {
		o.log = quiet
	}
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"},
		Logger:    memberlistLogger(o.log),
	})
	if err != nil {
		return nil, nil, err
	}
	ft := clustertest.NewFaultyTransport(nt)
	m, err := NewMembership(MembershipConfig{
		Self:      NodeMeta{ID: id, ClientAddr: "127.0.0.1:1" + id, LinkAddr: "127.0.0.1:2" + id},
		Bind:      "127.0.0.1:0",
		Seeds:     seeds,
		Secret:    o.secret,
		Timing:    TestTiming(),
		OnChange:  o.onChange,
		Transport: ft,
		Logger:    o.log,
	})
	return m, ft, err
}

func ids(ms []Member) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.ID)
	}
	return strings.Join(s, ",")
}

// sees reports whether every node lists exactly the given ids.
func sees(want string, nodes ...*gossipNode) func() bool {
	return func() bool {
		for _, n := range nodes {
			if ids(n.Members()) != want {
				return false
			}
		}
		return true
	}
}

func startThree(t *testing.T, o nodeOpts) (a, b, c *gossipNode) {
	t.Helper()
	a = startGossip(t, "1", nil, o)
	b = startGossip(t, "2", []string{a.Addr()}, o)
	c = startGossip(t, "3", []string{a.Addr()}, o)
	actortest.Eventually(t, "three members everywhere", sees("1,2,3", a, b, c))
	return a, b, c
}

func TestMembershipConverges(t *testing.T) {
	a, b, c := startThree(t, nodeOpts{secret: "s3cret"})
	for _, n := range []*gossipNode{a, b, c} {
		for _, id := range []string{"1", "2", "3"} {
			m, ok := n.Member(id)
			if !ok || m.ClientAddr != "127.0.0.1:1"+id || m.LinkAddr != "127.0.0.1:2"+id || m.State != MemberAlive {
				t.Fatalf("node %s sees member %s as %+v (found %v)", n.Self().ID, id, m, ok)
			}
		}
		if _, ok := n.Member("4"); ok {
			t.Fatal("Member found an unknown id")
		}
	}
	if m, _ := a.Member("3"); m.GossipAddr != c.Addr() {
		t.Fatalf("gossip addr of 3 = %s, want %s", m.GossipAddr, c.Addr())
	}
}

func TestMembershipLeaveIsNoticed(t *testing.T) {
	a, b, c := startThree(t, nodeOpts{})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Leave(ctx); err != nil {
		t.Fatalf("leave: %v", err)
	}
	actortest.Eventually(t, "the others to drop the leaver", sees("1,2", a, b))
	t.Logf("graceful leave noticed in %v", time.Since(start))
	if err := c.Close(); err != nil {
		t.Fatalf("Close after Leave: %v", err)
	}
}

func TestMembershipCrashIsDetected(t *testing.T) {
	a, b, c := startThree(t, nodeOpts{})
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	actortest.Eventually(t, "the others to declare the crashed node dead", sees("1,2", a, b))
	took := time.Since(start)
	t.Logf("crash detected in %v", took)
	// TestTiming aims at about a second; the bound leaves room for a
	// loaded machine.
	if took > 6*time.Second {
		t.Fatalf("crash detected after %v, want well under 6s with TestTiming", took)
	}
}

// TestMembershipSuspect cuts gossip between 1 and 3 only: 2 still relays
// memberlist's indirect probes, so 3 stays a member, but 1's own pings fail
// and 1 sees 3 as suspect until the cut heals.
func TestMembershipSuspect(t *testing.T) {
	a, b, c := startThree(t, nodeOpts{})
	a.ft.Block(c.Addr())
	c.ft.Block(a.Addr())
	actortest.Eventually(t, "1 to suspect 3", func() bool {
		m, ok := a.Member("3")
		return ok && m.State == MemberSuspect
	})
	if m, _ := b.Member("3"); m.State != MemberAlive {
		t.Fatalf("2 sees 3 as %v, want alive", m.State)
	}
	a.ft.Heal()
	c.ft.Heal()
	actortest.Eventually(t, "1 to see 3 alive again", func() bool {
		m, ok := a.Member("3")
		return ok && m.State == MemberAlive
	})
}

func TestMembershipPartitionHeals(t *testing.T) {
	a, b, c := startThree(t, nodeOpts{secret: "k"})
	c.ft.Isolate()
	actortest.Eventually(t, "the majority to drop the isolated node", sees("1,2", a, b))
	actortest.Eventually(t, "the isolated node to be alone", sees("3", c))
	c.ft.Heal()
	actortest.Eventually(t, "the partition to merge back", sees("1,2,3", a, b, c))

	// The seed itself cut off: the others find it again through their seeds.
	a.ft.Isolate()
	actortest.Eventually(t, "the others to drop the seed", sees("2,3", b, c))
	a.ft.Heal()
	actortest.Eventually(t, "the seed to come back", sees("1,2,3", a, b, c))
}

func TestMembershipWrongSecretCannotJoin(t *testing.T) {
	a := startGossip(t, "1", nil, nodeOpts{secret: "right"})
	b := startGossip(t, "2", []string{a.Addr()}, nodeOpts{secret: "right"})
	actortest.Eventually(t, "the right secret to join", sees("1,2", a, b))
	lg, rec := newLogRecorder()
	c := startGossip(t, "3", []string{a.Addr()}, nodeOpts{secret: "wrong", log: lg})
	if rec.count("initial join failed") != 1 {
		t.Fatal("the initial join with a wrong secret was not reported")
	}
	// Wait for several rejoin attempts to have failed, then check nobody
	// let the stranger in.
	actortest.Eventually(t, "two failed rejoins", func() bool { return rec.count("rejoin failed") >= 2 })
	if !sees("1,2", a, b)() || !sees("3", c)() {
		t.Fatalf("a node with another secret got in: 1 sees %s, 3 sees %s", ids(a.Members()), ids(c.Members()))
	}
}

func TestMembershipOnChangeInOrder(t *testing.T) {
	var (
		mu       sync.Mutex
		seen     []string
		inFlight atomic.Int32
		overlap  atomic.Bool
	)
	record := func(ms []Member) {
		if inFlight.Add(1) > 1 {
			overlap.Store(true)
		}
		defer inFlight.Add(-1)
		mu.Lock()
		defer mu.Unlock()
		if s := ids(ms); len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s) // state-only changes keep the id list
		}
	}
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}
	a := startGossip(t, "1", nil, nodeOpts{onChange: record})
	actortest.Eventually(t, "the first call", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) > 0 })
	b := startGossip(t, "2", []string{a.Addr()}, nodeOpts{})
	actortest.Eventually(t, "2 in OnChange", func() bool { return last() == "1,2" })
	c := startGossip(t, "3", []string{b.Addr()}, nodeOpts{})
	actortest.Eventually(t, "3 in OnChange", func() bool { return last() == "1,2,3" })
	if err := c.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	actortest.Eventually(t, "3 gone in OnChange", func() bool { return last() == "1,2" })
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"1", "1,2", "1,2,3", "1,2"}; !slices.Equal(seen, want) {
		t.Fatalf("OnChange saw %q, want %q", seen, want)
	}
	if overlap.Load() {
		t.Fatal("OnChange ran concurrently with itself")
	}
}

func TestMembershipDuplicateID(t *testing.T) {
	lg, rec := newLogRecorder()
	a := startGossip(t, "1", nil, nodeOpts{secret: "k", log: lg})
	b := startGossip(t, "2", []string{a.Addr()}, nodeOpts{secret: "k"})
	actortest.Eventually(t, "two members", sees("1,2", a, b))
	_, _, err := newGossip("2", []string{a.Addr()}, nodeOpts{secret: "k"})
	if !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("second node with id 2: err %v, want ErrDuplicateID", err)
	}
	// The seed merges the newcomer's state on its own goroutine, maybe
	// after the newcomer has given up.
	actortest.Eventually(t, "the seed to log the refused duplicate", func() bool { return rec.count("two nodes use one id") > 0 })
	if m, _ := a.Member("2"); m.GossipAddr != b.Addr() {
		t.Fatalf("member 2 is at %s, want the first holder %s", m.GossipAddr, b.Addr())
	}
}

func TestMembershipConfigErrors(t *testing.T) {
	for name, cfg := range map[string]MembershipConfig{
		"no id":         {Bind: "127.0.0.1:0"},
		"meta too long": {Self: NodeMeta{ID: "x", ClientAddr: strings.Repeat("a", 600)}, Bind: "127.0.0.1:0"},
		"bad bind":      {Self: NodeMeta{ID: "x"}, Bind: "127.0.0.1"},
	} {
		if m, err := NewMembership(cfg); err == nil {
			_ = m.Close()
			t.Errorf("%s: no error", name)
		}
	}
	for _, bind := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0"} {
		_, err := NewMembership(MembershipConfig{Self: NodeMeta{ID: "x"}, Bind: bind})
		if !errors.Is(err, ErrInsecureBind) {
			t.Errorf("bind %s without secret: err %v, want ErrInsecureBind", bind, err)
		}
	}
	m, err := NewMembership(MembershipConfig{Self: NodeMeta{ID: "x"}, Bind: "localhost:0", Timing: TestTiming(), Logger: quiet})
	if err != nil {
		t.Fatalf("localhost without secret: %v", err)
	}
	defer m.Close()
	if !strings.HasPrefix(m.Addr(), "127.0.0.1:") || strings.HasSuffix(m.Addr(), ":0") {
		t.Fatalf("Addr = %s", m.Addr())
	}
	if got := fmt.Sprint(MemberSuspect, MemberAlive); got != "suspect alive" {
		t.Fatalf("state names = %q", got)
	}
}
