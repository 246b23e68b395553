package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/wal"
)

// ErrUnavailable: a session's owner cannot be reached now (it just failed
// and the cluster has not settled); the client should retry, to any node.
var ErrUnavailable = errors.New("cluster: the session's owner cannot be reached")

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
	// Secret encrypts gossip and authenticates the node link; empty is
	// allowed only on a loopback Gossip.
	Secret string
	// Timing is the memberlist preset: LANTiming (default), LocalTiming,
	// or TestTiming (a dead node noticed in about a second).
	Timing Timing
	// Replicas is how many nodes hold each session's log, the owner
	// included (R); capped by the cluster's size. Default 2.
	Replicas int
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
	// MaxPulls caps the activations fetching a log from another node at
	// once. Default 8.
	MaxPulls int
	// EncodeFrame, when set, is how this node's gateway encodes a frame
	// for its clients. The owner of a session then encodes its history
	// batches — the big frames — for clients attached through another
	// node's gateway, which passes them on as they are (FrameConn),
	// instead of the batch crossing the link as msgpack to be decoded and
	// encoded again there.
	EncodeFrame func(actor.Out) ([]byte, error)
	// Transport replaces memberlist's network transport (tests cut gossip
	// with a FaultyTransport).
	Transport memberlist.Transport
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Self.ID == "" || c.Store == nil || c.Gossip == "" {
		return errors.New("cluster: Config.Self.ID, Config.Store and Config.Gossip are required")
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
	Members     int
	Pulls       uint64 // activations that fetched a log from another node
	Forwarded   uint64 // client sessions opened on another owner
	Served      uint64 // client sessions served for another node's client
	Replicated  uint64 // batches stored on every replica
	Fenced      uint64 // appends refused because another node owns the session
	Moved       uint64 // actors stopped because the session's owner changed
	CatchUps    uint64 // replicas brought up to date
	Unavailable uint64 // opens answered unavailable
	Frames      uint64 // history batches encoded here for another node's client
}

// Cluster is a node's part in the cluster: membership, placement, the
// node link, the replicated journal the session registry writes through,
// and the routing of client sessions to their owners.
type Cluster struct {
	cfg     Config
	log     *slog.Logger
	link    *Link
	members *Membership
	journal *journal
	pulls   chan struct{}
	viewed  chan struct{} // closed at the first member list

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.RWMutex
	place *Placement
	view  map[string]Member
	gone  map[string]bool // members the view dropped (see onChange)
	reg   *actor.Registry // set by Attach
	left  bool

	stats struct {
		pulls, forwarded, served, replicated, fenced, moved, catchUps, unavailable, frames atomic.Uint64
	}
	closeOnce sync.Once
}

// New starts the node link and gossip, joins the seeds, and waits for the
// first member list. Attach the session registry before serving clients.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger.With("node", cfg.Self.ID), pulls: make(chan struct{}, cfg.MaxPulls), viewed: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.journal = newJournal(c)
	c.place = NewPlacement([]string{cfg.Self.ID}, cfg.Placement)
	c.view = map[string]Member{cfg.Self.ID: {NodeMeta: cfg.Self}}
	c.gone = map[string]bool{}
	var err error
	c.link, err = NewLink(LinkConfig{
		NodeID: cfg.Self.ID, Secret: cfg.Secret, Serve: c.serve, Accept: c.accept,
		CallTimeout: cfg.CallTimeout, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	c.members, err = NewMembership(MembershipConfig{
		Self: cfg.Self, Bind: cfg.Gossip, Seeds: cfg.Seeds, Secret: cfg.Secret, Timing: cfg.Timing,
		OnChange: c.onChange, Transport: cfg.Transport, Logger: cfg.Logger,
	})
	if err != nil {
		_ = c.link.Close()
		return nil, err
	}
	// Ownership must be known before the registry recovers what this node
	// owns: wait for the first member list.
	select {
	case <-c.viewed:
	case <-time.After(10 * time.Second):
		c.log.Warn("no member list yet; starting with this node alone")
	}
	return c, nil
}

// Handler serves the node link; mount it at /v1/link.
func (c *Cluster) Handler() http.Handler { return c.link.Handler() }

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
	c.moveAway(nil) // sessions recovered at boot that another node now owns
}

// NewID returns a fresh session id.
func (c *Cluster) NewID() string { return rand.Text() }

// Owns reports whether this node owns sid now.
func (c *Cluster) Owns(sid string) bool { return c.owner(sid) == c.cfg.Self.ID }

// Ready is nil once the node is part of a cluster: joined to another
// member, or alone because no seed was given.
func (c *Cluster) Ready() error {
	if len(c.cfg.Seeds) > 0 && len(c.members.Members()) < 2 {
		return errors.New("not joined to the cluster yet")
	}
	return nil
}

// Members returns the members as this node sees them.
func (c *Cluster) Members() []Member { return c.members.Members() }

// Stats returns the counters.
func (c *Cluster) Stats() Stats {
	c.mu.RLock()
	n := len(c.view)
	c.mu.RUnlock()
	s := &c.stats
	return Stats{
		Members: n, Pulls: s.pulls.Load(), Forwarded: s.forwarded.Load(), Served: s.served.Load(),
		Replicated: s.replicated.Load(), Fenced: s.fenced.Load(), Moved: s.moved.Load(),
		CatchUps: s.catchUps.Load(), Unavailable: s.unavailable.Load(), Frames: s.frames.Load(),
	}
}

// Leave hands this node's sessions over and leaves the cluster: the
// others are told (they stop routing here and take the sessions over from
// the copies they hold), then every session actor here is stopped — its
// appends finished and replicated, its clients, wherever attached, told
// to reconnect (1012). Close follows.
func (c *Cluster) Leave(ctx context.Context) error {
	c.mu.Lock()
	c.left = true
	reg := c.reg
	c.mu.Unlock()
	// The leave message goes out with the next gossip rounds; when no one
	// is left to take it, memberlist would wait for the whole deadline.
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := c.members.Leave(lctx)
	cancel()
	if reg != nil {
		c.evict(ctx, reg, reg.ActiveIDs())
	}
	return err
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
		err = errors.Join(c.members.Close(), c.link.Close())
	})
	return err
}

// owner is the node that owns sid in this node's view.
func (c *Cluster) owner(sid string) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.place.Owner(sid)
}

// replicas are the nodes that hold sid's log: the owner, then its next
// owners; at most Replicas of them.
func (c *Cluster) replicas(sid string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.place.Replicas(sid, c.cfg.Replicas)
}

// member returns a member's metadata in this node's view.
func (c *Cluster) member(id string) (Member, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.view[id]
	return m, ok
}

// others are the members but this node.
func (c *Cluster) others() []Member {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Member, 0, len(c.view))
	for id, m := range c.view {
		if id != c.cfg.Self.ID {
			out = append(out, m)
		}
	}
	return out
}

// call calls method on node id over the link.
func (c *Cluster) call(ctx context.Context, id, method string, req, resp any) error {
	m, ok := c.member(id)
	if !ok {
		return fmt.Errorf("%w: %s is not a member", ErrLinkDown, id)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	return c.link.Call(ctx, m.LinkAddr, method, req, resp)
}
