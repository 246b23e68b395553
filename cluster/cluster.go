package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// ErrUnavailable: a session's owner cannot be reached now (it just failed
// and the cluster has not settled); the client should retry, to any node.
// It wraps machine.ErrUnavailable, so the session's actor tells its client
// the same when its appends cannot reach the replicas.
var ErrUnavailable = fmt.Errorf("cluster: the session's owner cannot be reached: %w", machine.ErrUnavailable)

// Config configures a Cluster. Self.ID, Store and Gossip are required.
type Config struct {
	// Self is this node: its id (unique in the cluster), the address
	// clients and peers reach its HTTP server at (ClientAddr), and where
	// its node link is served (LinkAddr, normally the same server: mount
	// Handler at /v1/link).
	Self NodeMeta
	// Gossip is memberlist's bind address (host:port; port 0 picks one).
	Gossip string
	// Seeds are gossip addresses of nodes to join; none starts a cluster of
	// one that others may join.
	Seeds []string
	// Secret encrypts gossip, authenticates the node link and, unless
	// LinkCertFile is set, keys the link's TLS (see LinkTLSConfig); empty
	// is allowed only on a loopback Gossip, and then the link is plain
	// text, allowed only between loopback addresses.
	Secret string
	// LinkCertFile, LinkKeyFile and LinkCAFile, if set, are the node
	// link's TLS certificate, key and the CA peers' certificates must
	// chain to, instead of a key derived from Secret.
	LinkCertFile, LinkKeyFile, LinkCAFile string
	// Timing is the memberlist preset: LANTiming (default), LocalTiming,
	// or TestTiming (a dead node noticed in about a second).
	Timing Timing
	// Replicas is how many nodes hold each session's log, the owner
	// included (R): an entry is acknowledged only once all R that the
	// committed configuration names have stored it. Capped only by the
	// configuration's size, never by what this node can see. Default 2.
	Replicas int
	// RaftDir is where Raft's log, stable store and snapshots live (the
	// node puts it in its data directory). Required.
	RaftDir string
	// BootstrapExpect is how many nodes form the first Raft group
	// (Consul's -bootstrap-expect): a node without Raft state waits until
	// gossip shows that many nodes expecting the same, and the lowest ids
	// bootstrap together. 1 bootstraps this node alone at once. 0, the
	// default, means 1 without Seeds, and with Seeds: never bootstrap,
	// wait for the existing group's leader to add this node. A node with
	// Raft state ignores it and rejoins the peers it knew.
	BootstrapExpect int
	// Placement must be the same on every node.
	Placement PlacementConfig
	// Store is this node's log: its own sessions and the copies it keeps
	// for other owners.
	Store *wal.Log
	// ForwardFor is how long a node keeps trying to reach a session's
	// owner that does not answer (suspected, not yet declared dead) before
	// telling the client to retry (unavailable, 1013). Default 10s.
	ForwardFor time.Duration
	// CallTimeout bounds one call to another node (replication, survey,
	// pull page). Default 5s.
	CallTimeout time.Duration
	// RereplicateRate bounds the sessions per second this node brings onto
	// their new write sets after a configuration change (see
	// rereplicate.go). Default 200.
	RereplicateRate float64
	// MaxPulls caps the activations fetching a log from another node at
	// once. Default 8.
	MaxPulls int
	// EncodeFrame, when set, is how this node's gateway encodes a frame
	// for its clients. The owner of a session then encodes its history
	// batches — the big frames — for clients attached through another
	// node's gateway, which passes them on as they are (FrameConn),
	// instead of the batch crossing the link as msgpack to be decoded and
	// encoded again there.
	EncodeFrame func(machine.Out) ([]byte, error)
	// Transport replaces memberlist's network transport (tests cut gossip
	// with a clustertest.FaultyTransport).
	Transport memberlist.Transport
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Self.ID == "" || c.Store == nil || c.Gossip == "" || c.RaftDir == "" {
		return errors.New("cluster: Config.Self.ID, Config.Store, Config.Gossip and Config.RaftDir are required")
	}
	if c.BootstrapExpect < 0 {
		return errors.New("cluster: Config.BootstrapExpect must be ≥ 0")
	}
	if c.BootstrapExpect == 0 && len(c.Seeds) == 0 {
		c.BootstrapExpect = 1
	}
	if c.Replicas <= 0 {
		c.Replicas = 2
	}
	if c.ForwardFor <= 0 {
		c.ForwardFor = 10 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.RereplicateRate <= 0 {
		c.RereplicateRate = 200
	}
	if c.MaxPulls <= 0 {
		c.MaxPulls = 8
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Stats are a cluster node's counters.
type Stats struct {
	Members      int // in the committed configuration
	Raft         Status
	Pulls        uint64 // activations that fetched a log from another node
	Forwarded    uint64 // client sessions opened on another owner
	Served       uint64 // client sessions served for another node's client
	Replicated   uint64 // batches stored on every replica
	Fenced       uint64 // appends refused because another node owns the session
	Moved        uint64 // actors stopped because the session's owner changed
	CatchUps     uint64 // replicas brought up to date
	Unavailable  uint64 // opens answered unavailable
	Frames       uint64 // history batches encoded here for another node's client
	Rereplicated uint64 // sessions brought onto a new write set in the background
	// Rereplicating is how many sessions this node's current pass has
	// left; RereplicatedConfiguration the configuration whose pass ended.
	Rereplicating             int64
	RereplicatedConfiguration uint64
	// Reports is how many times this node told the leader that its link
	// to a replica failed (reports.go).
	Reports uint64
}

// Cluster is a node's part in the cluster: membership, placement, the
// node link, the replicated journal the session registry writes through,
// and the routing of client sessions to their owners.
type Cluster struct {
	cfg     Config
	log     *slog.Logger
	link    *Link
	tls     *LinkTLS // nil: the link is plain text (loopback only)
	members *Membership
	cons    *consensus
	journal *journal
	reports *reports
	pulls   chan struct{}
	configs chan struct{} // a configuration was applied: move sessions

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.RWMutex
	config  Configuration     // the newest applied (maybe not caught up)
	place   *Placement        // over config's members
	view    map[string]Member // the gossip view, for addresses of members not in config yet
	reg     *actor.Registry   // set by Attach
	left    bool
	leavers map[string]bool // members that asked the leader to let them leave (leader.go: leaving)

	stats struct {
		pulls, forwarded, served, replicated, fenced, moved, catchUps, unavailable, frames, rereplicated, rereplicatedCfg, reports atomic.Uint64
		rereplicating                                                                                                              atomic.Int64
	}
	closeOnce sync.Once
}

// New starts the node link, Raft and gossip. It does not wait for the
// committed configuration: the node must serve its HTTP listener (Raft
// and the link are on it) for that; WaitReady does.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger.With("node", cfg.Self.ID), pulls: make(chan struct{}, cfg.MaxPulls), configs: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.journal = newJournal(c)
	c.reports = newReports()
	c.place = NewPlacement(nil, cfg.Placement)
	c.view = map[string]Member{cfg.Self.ID: {NodeMeta: cfg.Self}}
	c.leavers = map[string]bool{}
	var err error
	if cfg.Secret != "" || cfg.LinkCertFile != "" || cfg.LinkKeyFile != "" || cfg.LinkCAFile != "" {
		if c.tls, err = NewLinkTLS(LinkTLSConfig{Secret: cfg.Secret, CertFile: cfg.LinkCertFile, KeyFile: cfg.LinkKeyFile, CAFile: cfg.LinkCAFile}); err != nil {
			return nil, err
		}
	}
	lc := LinkConfig{
		NodeID: cfg.Self.ID, Secret: cfg.Secret, Serve: c.serve, Accept: c.accept,
		CallTimeout: cfg.CallTimeout, Logger: cfg.Logger,
	}
	if c.tls != nil {
		lc.TLS = c.tls.Client
	}
	c.link, err = NewLink(lc)
	if err != nil {
		return nil, err
	}
	if c.cons, err = newConsensus(c, c.configured); err != nil {
		_ = c.link.Close()
		return nil, err
	}
	self := cfg.Self
	self.Expect, self.HasState = cfg.BootstrapExpect, c.cons.hadState
	c.members, err = NewMembership(MembershipConfig{
		Self: self, Bind: cfg.Gossip, Seeds: cfg.Seeds, Secret: cfg.Secret, Timing: cfg.Timing,
		MoreSeeds: c.cons.gossipSeeds, OnChange: c.onChange, Transport: cfg.Transport, Logger: cfg.Logger,
	})
	if err != nil {
		_ = c.cons.close()
		_ = c.link.Close()
		return nil, err
	}
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		c.cons.run(c.ctx)
	}()
	go func() {
		defer c.wg.Done()
		c.moveLoop()
	}()
	return c, nil
}

// WaitReady blocks until this node is in a committed configuration it
// has caught up with (or ctx ends): only then may it claim sessions. A
// restarted node waits here for a quorum of its old peers.
func (c *Cluster) WaitReady(ctx context.Context) error {
	_, err := c.cons.waitCommitted(ctx)
	return err
}

// LinkTLS is the TLS configuration peers' connections to this node's
// listener must be handshaken with (their ClientHello asks for LinkALPN);
// nil when the link is plain text (no secret, loopback only). Whoever
// serves Handler must refuse /v1/link and /v1/raft on any other
// connection, as the gateway does.
func (c *Cluster) LinkTLS() *tls.Config {
	if c.tls == nil {
		return nil
	}
	return c.tls.Server
}

// Handler serves the node link at /v1/link and Raft at /v1/raft; mount
// it at both.
func (c *Cluster) Handler() http.Handler {
	link := c.link.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/raft" {
			c.cons.stream.ServeHTTP(w, r)
			return
		}
		link.ServeHTTP(w, r)
	})
}

// Journal is the replicated journal for the session registry.
func (c *Cluster) Journal() actor.Journal { return c.journal }

// GossipAddr is the address other nodes join this one at.
func (c *Cluster) GossipAddr() string { return c.members.Addr() }

// Attach gives the cluster the node's session registry: from then on it
// serves sessions for clients of other nodes and moves sessions away when
// their owner changes.
func (c *Cluster) Attach(reg *actor.Registry) {
	c.mu.Lock()
	c.reg = reg
	c.mu.Unlock()
	c.moveAway() // sessions recovered at boot that another node now owns
}

// NewID returns a fresh session id.
func (c *Cluster) NewID() string { return rand.Text() }

// Owns reports whether this node owns sid now: under a committed
// configuration it has caught up with.
func (c *Cluster) Owns(sid string) bool {
	cfg, err := c.cons.committed()
	return err == nil && c.cons.fsm.placement(cfg).Owner(sid) == c.cfg.Self.ID
}

// Ready is nil once the node is in the newest committed configuration it
// can learn of, caught up with its leader.
func (c *Cluster) Ready() error {
	_, err := c.cons.committed()
	return err
}

// Configuration is the newest configuration this node has applied.
func (c *Cluster) Configuration() Configuration { return c.cons.fsm.current() }

// Members returns the members as this node sees them.
func (c *Cluster) Members() []Member { return c.members.Members() }

// Stats returns the counters.
func (c *Cluster) Stats() Stats {
	c.mu.RLock()
	n := len(c.config.Members)
	c.mu.RUnlock()
	s := &c.stats
	return Stats{
		Members: n, Raft: c.cons.status(), Pulls: s.pulls.Load(), Forwarded: s.forwarded.Load(), Served: s.served.Load(),
		Replicated: s.replicated.Load(), Fenced: s.fenced.Load(), Moved: s.moved.Load(),
		CatchUps: s.catchUps.Load(), Unavailable: s.unavailable.Load(), Frames: s.frames.Load(),
		Rereplicated: s.rereplicated.Load(), Rereplicating: s.rereplicating.Load(),
		RereplicatedConfiguration: s.rereplicatedCfg.Load(), Reports: s.reports.Load(),
	}
}

// Leave hands this node's sessions over and leaves the cluster: the
// leader commits a configuration without this node (and drops it from
// Raft), so the sessions move to their replicas; then every session
// actor here is stopped — its clients, wherever attached, told to
// reconnect (1012) — and gossip says goodbye. Close follows; after Close,
// Leave returns at once: a closed node has no voice left to leave with.
func (c *Cluster) Leave(ctx context.Context) error {
	if c.ctx.Err() != nil {
		return fmt.Errorf("cluster: leave after close: %w", ErrClosed)
	}
	c.mu.Lock()
	c.left = true
	reg := c.reg
	c.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cerr := c.leaveConfiguration(cctx)
	cancel()
	if reg != nil {
		c.evict(ctx, reg, reg.ActiveIDs())
	}
	// The leave message goes out with the next gossip rounds; when no one
	// is left to take it, memberlist would wait for the whole deadline.
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := c.members.Leave(lctx)
	cancel()
	return errors.Join(cerr, err)
}

// hasLeft reports whether Leave was called.
func (c *Cluster) hasLeft() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.left
}

// Close stops gossip and the node link. Safe to call twice.
func (c *Cluster) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		err = errors.Join(c.members.Close(), c.cons.close(), c.link.Close())
	})
	return err
}

// owner is the node that owns sid in this node's view.
func (c *Cluster) owner(sid string) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.place.Owner(sid)
}

// replicas are the nodes that hold sid's log under the newest applied
// configuration: the owner, then its next owners; R of them (fewer only
// when the configuration has fewer members).
func (c *Cluster) replicas(sid string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.place.Replicas(sid, c.config.Replicas)
}

// member returns a node's addresses: from the newest configuration that
// names it, else from gossip.
func (c *Cluster) member(id string) (Member, bool) {
	c.mu.RLock()
	cfg := c.config
	gm, inView := c.view[id]
	c.mu.RUnlock()
	if m, ok := cfg.Member(id); ok {
		return Member{NodeMeta: m, GossipAddr: m.Gossip}, true
	}
	hist := c.cons.fsm.since(0)
	for i := len(hist) - 1; i >= 0; i-- {
		if m, ok := hist[i].Member(id); ok {
			return Member{NodeMeta: m, GossipAddr: m.Gossip}, true
		}
	}
	return gm, inView
}

// call calls method on node id over the link.
func (c *Cluster) call(ctx context.Context, id string, method Op, req, resp any) error {
	m, ok := c.member(id)
	if !ok {
		return fmt.Errorf("%w: %s is not a member", ErrLinkDown, id)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	return c.link.Call(ctx, m.LinkAddr, method, req, resp)
}
