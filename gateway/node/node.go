package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/wal"
)

// Config configures a Node. Dir and Gateway.Secret are required; the
// sub-configs are passed on as they are, except for the fields that wire
// the parts together, which the node sets.
type Config struct {
	// Dir is the Pebble directory.
	Dir string
	// Listen is the HTTP + WebSocket address. Default 127.0.0.1:0.
	Listen string
	// Listener, if set, is used instead of listening on Listen.
	Listener net.Listener
	// NodeID names the node; default the listener's address.
	NodeID string
	// WAL configures the store (Dir, NodeID, OnCommit, Logger are set).
	WAL wal.Config
	// Actor configures the registry (Journal, Store are set).
	Actor actor.Config
	// Gateway configures the server (Backend and Metrics are set; Ready,
	// if given, is asked after the node's own readiness checks).
	Gateway gateway.Config
	// Cluster, when set, makes the node a cluster member (Self, Store and
	// Logger are set by the node; Self.ID is NodeID, Self.ClientAddr and
	// Self.LinkAddr are Advertise); nil runs the node alone, without gossip.
	Cluster *cluster.Config
	// Advertise is the host:port other nodes reach this node's HTTP server
	// at (its node link is there); default the listener's address.
	Advertise string
	// Logger; default slog.Default(). It is also the parts' logger unless
	// their own config names one.
	Logger *slog.Logger
	// Listening, if set, is called with the served address as soon as the
	// listener serves, which for a clustered node is before Start returns
	// (it may wait long for its peers).
	Listening func(addr, id string)
}

// Node is one running node.
type Node struct {
	// Addr is the address the node serves on (host:port).
	Addr string
	// ID is the node's id.
	ID string

	Log      *wal.Log
	Registry *actor.Registry
	Server   *gateway.Server
	Metrics  *gateway.Metrics
	// Cluster is nil for a node that runs alone.
	Cluster *cluster.Cluster

	log        *slog.Logger
	mu         sync.Mutex // Registry, set late in a cluster
	tls        bool
	extraReady func() error
	served     chan error
	draining   atomic.Bool
	closeOnce  sync.Once
	closeErr   error
}

// New opens the store, recovers the sessions, and starts serving: Start
// without a deadline.
func New(cfg Config) (*Node, error) { return Start(context.Background(), cfg) }

// Start opens the store, recovers the sessions, and starts serving. A
// clustered node serves its HTTP listener at once (Raft and the node link
// are on it; /healthz answers, /readyz says why not yet, clients are told
// unavailable) and returns once it is in a committed configuration it has
// caught up with: a restarted node waits for a quorum of its peers, until
// ctx ends.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Dir == "" {
		return nil, errors.New("node: Config.Dir is required")
	}
	ln := cfg.Listener
	if ln == nil {
		addr := cfg.Listen
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	n := &Node{Addr: ln.Addr().String(), ID: cfg.NodeID, log: cfg.Logger, served: make(chan error, 1), tls: cfg.Gateway.TLS != nil}
	if n.ID == "" {
		id, err := keptID(cfg.Dir, n.Addr)
		if err != nil {
			ln.Close()
			return nil, err
		}
		n.ID = id
	}
	if err := n.start(ctx, cfg, ln); err != nil {
		ln.Close()
		n.stopParts()
		return nil, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context, cfg Config, ln net.Listener) error {
	n.Metrics = cfg.Gateway.Metrics
	if n.Metrics == nil {
		n.Metrics = gateway.NewMetrics()
	}
	wc := cfg.WAL
	wc.Dir, wc.NodeID = cfg.Dir, n.ID
	wc.OnCommit = n.Metrics.ObserveCommit
	if wc.Logger == nil {
		wc.Logger = cfg.Logger
	}
	var err error
	if n.Log, err = wal.New(wc); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	ac := cfg.Actor
	ac.Journal, ac.Store = n.Log, n.Log
	if ac.Logger == nil {
		ac.Logger = cfg.Logger
	}
	gc := cfg.Gateway
	n.extraReady = gc.Ready
	gc.Metrics, gc.Ready = n.Metrics, n.ready
	if gc.Logger == nil {
		gc.Logger = cfg.Logger
	}
	if cfg.Cluster == nil {
		if n.Registry, err = actor.New(ac); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		// Alone, recovery waits on nothing but the local disk: finish it
		// before serving, so that a node that listens is ready.
		<-n.Registry.Recovered()
		n.Metrics.Watch(n.Log.Stats, n.Registry.Stats)
		gc.Backend = gateway.Local(n.Registry)
		if n.Server, err = gateway.New(gc); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		go func() { n.served <- n.Server.Serve(ln) }()
		if cfg.Listening != nil {
			cfg.Listening(n.Addr, n.ID)
		}
		return nil
	}
	cc := *cfg.Cluster
	adv := cfg.Advertise
	if adv == "" {
		adv = n.Addr
	}
	cc.Self = cluster.NodeMeta{ID: n.ID, ClientAddr: adv, LinkAddr: adv}
	cc.Store = n.Log
	if cc.RaftDir == "" {
		cc.RaftDir = filepath.Join(cfg.Dir, "raft")
	}
	if cc.EncodeFrame == nil {
		cc.EncodeFrame = gateway.EncodeFrame
	}
	if cc.Logger == nil {
		cc.Logger = cfg.Logger
	}
	if n.Cluster, err = cluster.New(cc); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.Metrics.WatchCluster(n.Cluster.Stats)
	// Serve first: Raft and the node link are on this listener, and a
	// restarted node's peers must reach it before it can catch up. Until
	// the registry is attached the cluster answers clients unavailable.
	gc.Backend, gc.Link, gc.LinkTLS = gateway.Clustered(n.Cluster), n.Cluster.Handler(), n.Cluster.LinkTLS()
	if n.Server, err = gateway.New(gc); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	stopped := make(chan struct{})
	go func() {
		n.served <- n.Server.Serve(ln)
		close(stopped)
	}()
	if cfg.Listening != nil {
		cfg.Listening(n.Addr, n.ID)
	}
	wait, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stopped: // the listener failed: stop waiting
			cancel()
		case <-wait.Done():
		}
	}()
	if err := n.Cluster.WaitReady(wait); err != nil {
		return fmt.Errorf("node: join the cluster: %w", err)
	}
	// Ownership is known now: recovery claims only what this node owns
	// under the committed configuration.
	ac.Journal, ac.Owns = n.Cluster.Journal(), n.Cluster.Owns
	reg, err := actor.New(ac)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.mu.Lock()
	n.Registry = reg
	n.mu.Unlock()
	n.Metrics.Watch(n.Log.Stats, reg.Stats)
	n.Cluster.Attach(reg)
	return nil
}

// ready is GET /readyz: not while draining or recovering the sessions a
// previous run left, and only while the store answers reads.
func (n *Node) ready() error {
	if n.draining.Load() {
		return errors.New("shutting down")
	}
	n.mu.Lock()
	reg := n.Registry
	n.mu.Unlock()
	if reg == nil {
		if err := n.Cluster.Ready(); err != nil {
			return fmt.Errorf("joining the cluster: %w", err)
		}
		return errors.New("joining the cluster")
	}
	select {
	case <-reg.Recovered():
	default:
		return errors.New("recovering sessions")
	}
	if n.Cluster != nil {
		if err := n.Cluster.Ready(); err != nil {
			return err
		}
	}
	if n.extraReady != nil {
		if err := n.extraReady(); err != nil {
			return err
		}
	}
	_, _, err := n.Log.LastAlive()
	return err
}

// Served reports the server's end: an error if it stopped on its own.
func (n *Node) Served() <-chan error { return n.served }

// URL is the node's WebSocket URL (wss:// when it serves TLS).
func (n *Node) URL() string {
	if n.tls {
		return "wss://" + n.Addr + "/v1/ws"
	}
	return "ws://" + n.Addr + "/v1/ws"
}

// HTTP is the node's base HTTP URL (https:// when it serves TLS).
func (n *Node) HTTP() string {
	if n.tls {
		return "https://" + n.Addr
	}
	return "http://" + n.Addr
}

// Close stops the node gracefully: it stops taking connections, shuts the
// sessions down (their clients are told to reconnect elsewhere, 1012),
// and closes the store. Safe to call twice.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.draining.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if n.Server != nil {
			_ = n.Server.Shutdown(ctx)
		}
		if n.Cluster != nil {
			// Others take the sessions over from the copies they hold.
			if err := n.Cluster.Leave(ctx); err != nil {
				n.log.Warn("leave the cluster", "err", err)
			}
		}
		n.closeErr = n.stopParts()
	})
	return n.closeErr
}

func (n *Node) stopParts() error {
	var errs []error
	n.mu.Lock()
	reg := n.Registry
	n.mu.Unlock()
	if reg != nil {
		// Actors close their clients with 1012 and keep their state in
		// the log.
		errs = append(errs, reg.Close())
	}
	if n.Server != nil {
		errs = append(errs, n.Server.Close())
	}
	if n.Cluster != nil {
		errs = append(errs, n.Cluster.Close())
	}
	if n.Log != nil {
		errs = append(errs, n.Log.Close())
	}
	return errors.Join(errs...)
}

// keptID is the node id kept in dir/node-id, or, the first time, def,
// kept there: a node's id must not change across restarts (it is its
// name in Raft's configuration and in its sessions' headers), and the
// default, the listener's address, may (port 0).
func keptID(dir, def string) (string, error) {
	path := filepath.Join(dir, "node-id")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("node: data directory: %w", err)
	}
	if err := os.WriteFile(path, []byte(def+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("node: keep the node id: %w", err)
	}
	return def, nil
}
