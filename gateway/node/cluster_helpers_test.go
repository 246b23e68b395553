package node_test

// In-process clusters for the cluster tests: real nodes (store, registry,
// gateway, gossip, node link) on 127.0.0.1 with ephemeral ports and temp
// dirs, each node's gossip behind a FaultyTransport so a test can cut it.

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/cluster/clustertest"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node"
	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/wal"
)

// secret is the kit's: the nodes check token's tokens with it.
var secret = []byte(nodetest.Secret)

// waitFor bounds every wait on a condition: generous, the machine is
// shared and the race detector is on.
const waitFor = 30 * time.Second

// settleFor bounds the waits for the cluster to agree after a change of
// members (every node's view, one owner per session): gossip's probes and
// the leader's reconfiguration run on timers that starve first when
// make test loads both cores (TestJoinUnderLoad, 22 s alone, took 195 s
// there and its 20 s wait for a joined node's view ran out). Like every
// wait it ends as soon as its condition holds.
const settleFor = 90 * time.Second

// opts shapes a test cluster.
type opts struct {
	replicas  int           // --replicas; default 2
	toolDelay time.Duration // the demo engine with this search delay; 0: echo
	forward   time.Duration // cluster.Config.ForwardFor; default 3s
	timing    *cluster.Timing
	engine    engine.Engine // every node's engine, when set (overrides toolDelay)
	flush     time.Duration
	secret    string        // cluster.Config.Secret: the link and Raft over TLS
	hibernate time.Duration // actor.Config.HibernateAfter; 0: its default
}

// tnode is one in-process node.
type tnode struct {
	*node.Node
	id     string
	ft     *clustertest.FaultyTransport
	demo   *engine.Demo // nil with the echo engine
	closed bool
}

// tcluster is a set of nodes started by one test; its cleanup closes them.
type tcluster struct {
	t     testing.TB
	o     opts
	log   *slog.Logger // the nodes' (actortest.Logger): printed if the test fails
	mu    sync.Mutex
	nodes []*tnode
	// dirs are the nodes' data directories. They are not t.TempDir()s:
	// one made after closeAll was registered would be removed before
	// closeAll runs (cleanups run last first), under a node still writing.
	dirs []string
	// starts ends the node.Start calls still waiting to join (closeAll
	// ends it first); nil until the first start.
	starts     context.Context
	stopStarts context.CancelFunc
}

// startCtx is the context node.Start runs under.
func (c *tcluster) startCtx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.starts == nil {
		c.starts, c.stopStarts = context.WithCancel(context.Background())
	}
	return c.starts
}

// cancelStarts ends every node.Start still waiting.
func (c *tcluster) cancelStarts() {
	c.startCtx()
	c.stopStarts()
}

// newCluster starts n nodes, n1 first and the others joining it, and
// waits until every node sees all of them.
func newCluster(t testing.TB, n int, o opts) *tcluster {
	t.Helper()
	if o.replicas == 0 {
		o.replicas = 2
	}
	if o.forward == 0 {
		o.forward = 3 * time.Second
	}
	c := &tcluster{t: t, o: o, log: actortest.Logger(t)}
	t.Cleanup(c.closeAll)
	for range n {
		c.add()
	}
	c.waitView(c.nodes...)
	return c
}

// add starts one more node, joining the gossip of every live node, and
// returns it without waiting for the cluster to see it.
func (c *tcluster) add() *tnode {
	c.t.Helper()
	var seeds []string
	for _, n := range c.live() {
		seeds = append(seeds, n.Cluster.GossipAddr())
	}
	id := "n" + string(rune('1'+len(c.nodes)))
	n, err := c.start(id, seeds, nil)
	if err != nil {
		c.t.Fatalf("start %s: %v", id, err)
	}
	return n
}

// start starts a node joining seeds; tweak, if set, may change its
// configuration before it starts.
func (c *tcluster) start(id string, seeds []string, tweak func(*node.Config)) (*tnode, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	ft := clustertest.NewFaultyTransport(nt)
	timing := cluster.TestTiming()
	if c.o.timing != nil {
		timing = *c.o.timing
	}
	tn := &tnode{id: id, ft: ft}
	var agent engine.Engine = engine.Echo{}
	switch {
	case c.o.engine != nil:
		agent = c.o.engine
	case c.o.toolDelay > 0:
		tn.demo = engine.NewDemo(engine.DemoConfig{SearchDelay: c.o.toolDelay})
		agent = tn.demo
	}
	dir, err := os.MkdirTemp("", "tether-"+id+"-")
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.dirs = append(c.dirs, dir)
	c.mu.Unlock()
	cfg := node.Config{
		Dir: dir, NodeID: id, Logger: c.log.With("node", id),
		Actor:   actor.Config{Engine: agent, ReplayLimit: 1000, MaxTurns: 1000, FlushInterval: c.o.flush, HibernateAfter: c.o.hibernate},
		Gateway: gateway.Config{Secret: secret, NoRateLimit: true},
		Cluster: &cluster.Config{
			Gossip: "127.0.0.1:0", Seeds: seeds, Timing: timing, Replicas: c.o.replicas,
			ForwardFor: c.o.forward, CallTimeout: 2 * time.Second, Transport: ft, Secret: c.o.secret,
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	if cfg.Cluster.Transport != memberlist.Transport(ft) {
		_ = ft.Shutdown() // the tweak chose another transport
		tn.ft = nil
	}
	nd, err := node.Start(c.startCtx(), cfg)
	if err != nil {
		return nil, err
	}
	tn.Node = nd
	c.mu.Lock()
	c.nodes = append(c.nodes, tn)
	c.mu.Unlock()
	return tn, nil
}

func (c *tcluster) byID(id string) *tnode {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %q", id)
	return nil
}

// live are the nodes not closed by the test.
func (c *tcluster) live() []*tnode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tnode
	for _, n := range c.nodes {
		if !n.closed {
			out = append(out, n)
		}
	}
	return out
}

// stop closes a node gracefully (what SIGTERM does: leave, hand over).
func (c *tcluster) stop(n *tnode) {
	c.t.Helper()
	c.mu.Lock()
	n.closed = true
	c.mu.Unlock()
	if err := n.Close(); err != nil {
		c.t.Errorf("close %s: %v", n.id, err)
	}
}

func (c *tcluster) closeAll() {
	c.cancelStarts()
	var wg sync.WaitGroup
	for _, n := range c.live() {
		wg.Go(func() { _ = n.Close() })
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.dirs {
		if err := os.RemoveAll(d); err != nil {
			c.t.Errorf("remove %s: %v", d, err)
		}
	}
}

func memberIDs(n *tnode) string {
	var ids []string
	for _, m := range n.Cluster.Members() {
		ids = append(ids, m.ID+":"+m.State.String())
	}
	return strings.Join(ids, ",")
}

// waitView waits until each of nodes sees exactly nodes as alive members
// and has placed sessions with that view.
func (c *tcluster) waitView(nodes ...*tnode) {
	c.t.Helper()
	var want []string
	for _, n := range nodes {
		want = append(want, n.id+":alive")
	}
	slices.Sort(want)
	w := strings.Join(want, ",")
	actortest.EventuallyWithin(c.t, settleFor, "every node to see "+w, func() bool {
		for _, n := range nodes {
			if memberIDs(n) != w || n.Cluster.Stats().Members != len(nodes) {
				return false
			}
		}
		return true
	})
}

// owner is the node among nodes that owns sid in its own view. It waits
// until exactly one does: a node that is applying a new configuration or
// has just missed its leader's heartbeat under load owns nothing for a
// moment, and two nodes a configuration apart may both think they own it
// until the slower one applies (the claim's fence, not this view, is what
// keeps them from both writing).
func owner(t testing.TB, sid string, nodes ...*tnode) *tnode {
	t.Helper()
	var found *tnode
	actortest.EventuallyWithin(t, settleFor, "exactly one node to own "+sid, func() bool {
		found = nil
		for _, n := range nodes {
			if n.Cluster.Owns(sid) {
				if found != nil {
					return false
				}
				found = n
			}
		}
		return found != nil
	})
	return found
}

// active lists the nodes among nodes whose registry has sid's actor.
func active(sid string, nodes ...*tnode) []string {
	var out []string
	for _, n := range nodes {
		if slices.Contains(n.Registry.ActiveIDs(), sid) {
			out = append(out, n.id)
		}
	}
	return out
}

// other is a node of c other than n.
func other(c *tcluster, n *tnode) *tnode {
	for _, o := range c.nodes {
		if o != n {
			return o
		}
	}
	return nil
}

// placementWithout is where c's sessions go once gone has left the
// configuration: the nodes' default placement over the others.
func placementWithout(c *tcluster, gone *tnode) *cluster.Placement {
	var ids []string
	for _, n := range c.nodes {
		if n != gone {
			ids = append(ids, n.id)
		}
	}
	return cluster.NewPlacement(ids, cluster.PlacementConfig{})
}

// header reads a node's own copy of sid.
func header(n *tnode, sid string) (wal.Header, bool) {
	h, err := n.Log.Header(sid)
	return h, err == nil
}

// sessionsIn counts the sessions a node's store holds (owned or copies).
func sessionsIn(t testing.TB, n *tnode) map[string]wal.Header {
	t.Helper()
	out := map[string]wal.Header{}
	err := n.Log.ScanHeaders(context.Background(), func(h wal.Header) error {
		out[h.SessionID] = h
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// token issues user a token that outlives the slowest cluster test.
func token(t testing.TB, user string) string {
	t.Helper()
	return nodetest.Issue(t, gateway.TokenSpec{User: user, TTL: 24 * time.Hour})
}

// get is an HTTP GET with an optional bearer token; it returns the status
// and body.
func get(t testing.TB, url, tok string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, body
}

// freeAddr returns a 127.0.0.1 address free for TCP and UDP right now,
// outside the ports outgoing connections are given (cluster.FreeLocalAddr).
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := cluster.FreeLocalAddr(true)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
