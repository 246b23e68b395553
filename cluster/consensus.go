package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"
)

// Sentinels of the committed configuration, all meaning "not now": a node
// that cannot name a caught-up configuration it belongs to claims nothing.
var (
	ErrNoConfiguration = errors.New("cluster: no committed configuration yet")
	ErrNoLeader        = errors.New("cluster: no Raft leader reachable")
	ErrCatchingUp      = errors.New("cluster: catching up with the committed configuration")
	ErrNotMember       = errors.New("cluster: this node is not in the committed configuration")
)

// maxVoters caps Raft's voters; further members are non-voters (they get
// the configurations but do not vote). Five voters survive two failures.
const maxVoters = 5

// consensus is the node's part in the Raft group that commits the
// cluster's configurations. Gossip detects, Raft decides: the leader
// turns what memberlist tells it (joins, deaths, leaves) into numbered
// configurations (leader.go), and every node computes placement over the
// newest configuration it has applied, and claims only once it has caught
// up with the leader.
type consensus struct {
	c      *Cluster
	log    *slog.Logger
	fsm    *fsm
	store  *raftStore
	stream *raftStream
	trans  *raft.NetworkTransport
	raft   *raft.Raft
	lease  time.Duration
	// leaderWait bounds how long fresh waits for a leader (Timing.RaftLeaderWait).
	leaderWait time.Duration
	expect     int

	hadState    bool
	kick        chan struct{} // gossip changed: the leader reconciles
	closeOnce   sync.Once
	reconcileMu sync.Mutex           // the loop and letLeave both reconcile
	fails       map[string]int       // probes in a row a member's link missed (under reconcileMu)
	missing     map[string]time.Time // voters gossip does not list, since when (under reconcileMu)
	closeErr    error

	// verifyMu is held (read) across a VerifyLeader and taken by close
	// before Raft shuts down: a verification queued in a Raft that then
	// shuts down is never answered.
	verifyMu sync.RWMutex
	closing  bool // under verifyMu

	mu            sync.Mutex
	leaderSince   time.Time // zero while not the leader
	barrierDone   bool
	commitLat     time.Duration // the last configuration's commit latency
	verifiedAt    time.Time     // leadership last confirmed (readindex.go)
	verifiedIndex uint64
	fsmHolds      uint64 // the FSM holds every command up to this Raft index (fsmBehind)
}

func newConsensus(c *Cluster, changed func(Configuration)) (*consensus, error) {
	cfg := c.cfg
	dir := cfg.RaftDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: raft directory: %w", err)
	}
	cs := &consensus{c: c, log: c.log.With("component", "raft"), expect: cfg.BootstrapExpect, kick: make(chan struct{}, 1), fails: map[string]int{}, missing: map[string]time.Time{}}
	cs.fsm = newFSM(cfg.Placement, changed)
	var err error
	if cs.store, err = openRaftStore(filepath.Join(dir, "log"), cs.log); err != nil {
		return nil, err
	}
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, Output: slogWriter{cs.log}})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl)
	if err != nil {
		_ = cs.store.Close()
		return nil, fmt.Errorf("cluster: raft snapshots: %w", err)
	}
	cs.hadState, err = raft.HasExistingState(cs.store, cs.store, snaps)
	if err != nil {
		_ = cs.store.Close()
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	cs.stream = newRaftStream(c.link, cfg.Self.LinkAddr, cs.log)
	cs.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: cs.stream, MaxPool: 3, Timeout: 5 * time.Second, Logger: hl,
		ServerAddressProvider: gossipAddrs{c},
	})
	rc := raftConfig(cfg.Self.ID, cfg.Timing, hl)
	cs.lease = 2 * rc.HeartbeatTimeout
	cs.leaderWait = cfg.Timing.RaftLeaderWait
	if cs.leaderWait <= 0 {
		cs.leaderWait = 2 * (rc.HeartbeatTimeout + rc.ElectionTimeout)
	}
	if cs.raft, err = raft.NewRaft(rc, cs.fsm, cs.store, cs.store, snaps, cs.trans); err != nil {
		_ = cs.trans.Close()
		_ = cs.store.Close()
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	if !cs.hadState && cs.expect == 1 {
		if err := cs.bootstrap([]NodeMeta{cfg.Self}); err != nil {
			_ = cs.close()
			return nil, err
		}
	}
	return cs, nil
}

// raftConfig is this node's Raft configuration.
func raftConfig(id string, t Timing, hl hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.Logger = hl
	rc.SnapshotThreshold, rc.TrailingLogs = 64, 128
	if t.RaftHeartbeat > 0 {
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = t.RaftHeartbeat, t.RaftElection, t.RaftLease
		rc.CommitTimeout = min(rc.CommitTimeout, t.RaftLease/2)
	}
	// A leader that takes itself out of the group (Leave) would shut its
	// Raft down at once, and a VerifyLeader already queued then (Raft
	// buffers them) is never answered: a peer's read index served here
	// hung, and Close with it. It becomes a follower instead, answering
	// every verification, until close shuts Raft down.
	rc.ShutdownOnRemove = false
	return rc
}

// bootstrap forms the first Raft group of the given members.
func (cs *consensus) bootstrap(members []NodeMeta) error {
	var servers []raft.Server
	for _, m := range members {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.LinkAddr)})
	}
	err := cs.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("cluster: bootstrap raft: %w", err)
	}
	cs.log.Info("raft group bootstrapped", "voters", len(servers))
	return nil
}

// maybeBootstrap forms the first group once gossip shows --bootstrap-expect
// nodes without Raft state that expect the same: the Expect lowest ids
// bootstrap together (every one of them picks the same set); later nodes
// are added by the leader.
func (cs *consensus) maybeBootstrap() {
	if cs.hadState || cs.expect < 2 {
		return
	}
	if cs.raft.LastIndex() > 0 {
		cs.hadState = true // added by a leader meanwhile
		return
	}
	var ready []NodeMeta
	for _, m := range cs.c.members.Members() {
		if m.HasState {
			return // a group exists: wait to be added to it
		}
		if m.Expect == cs.expect {
			ready = append(ready, m.NodeMeta)
		}
	}
	if len(ready) < cs.expect {
		return
	}
	slices.SortFunc(ready, func(a, b NodeMeta) int { return strings.Compare(a.ID, b.ID) })
	ready = ready[:cs.expect]
	if !slices.ContainsFunc(ready, func(m NodeMeta) bool { return m.ID == cs.c.cfg.Self.ID }) {
		return
	}
	if err := cs.bootstrap(ready); err != nil {
		cs.log.Warn("bootstrap", "err", err)
		return
	}
	cs.hadState = true
}

// committed is the newest configuration this node has applied, once it
// is caught up with a leader it has heard from within the lease and is a
// member of it.
func (cs *consensus) committed() (Configuration, error) {
	cfg := cs.fsm.current()
	if cfg.Number == 0 {
		return cfg, ErrNoConfiguration
	}
	if err := cs.caughtUp(); err != nil {
		return cfg, err
	}
	if _, ok := cfg.Member(cs.c.cfg.Self.ID); !ok {
		return cfg, ErrNotMember
	}
	return cfg, nil
}

func (cs *consensus) caughtUp() error {
	r := cs.raft
	if _, id := r.LeaderWithID(); id == "" {
		return ErrNoLeader
	}
	if r.State() == raft.Leader {
		cs.mu.Lock()
		ok := cs.barrierDone
		cs.mu.Unlock()
		if !ok {
			return ErrCatchingUp
		}
	} else if time.Since(r.LastContact()) > cs.lease {
		return ErrNoLeader
	}
	if r.AppliedIndex() < r.CommitIndex() {
		return ErrCatchingUp
	}
	if behind, _ := cs.fsmBehind(r.AppliedIndex()); behind {
		return ErrCatchingUp
	}
	return nil
}

// fsmBehind reports whether the FSM has yet to apply a configuration
// committed at or below index. Raft's AppliedIndex counts the entries
// handed to the FSM's goroutine, not those it applied (its doc says so):
// a node woken from a pause gets every configuration it missed at once,
// and for a moment AppliedIndex is past configurations its FSM does not
// hold. Every command is a configuration, numbered by its index, so the
// FSM holds all commands up to index when no entry between its newest
// configuration and index is a command. The FSM only grows, so what was
// found once (cs.fsmHolds) stays true, and each entry is read once.
func (cs *consensus) fsmBehind(index uint64) (bool, error) {
	have := cs.fsm.current().Number
	cs.mu.Lock()
	stop := max(have, cs.fsmHolds)
	cs.mu.Unlock()
	for i := index; i > stop; i-- {
		var l raft.Log
		err := cs.store.GetLog(i, &l)
		if errors.Is(err, raft.ErrLogNotFound) {
			// Compacted into a snapshot, which was taken of (or
			// restored into) this FSM: it holds everything up to here.
			break
		}
		if err != nil {
			return true, fmt.Errorf("cluster: read raft entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			return true, nil
		}
	}
	cs.mu.Lock()
	cs.fsmHolds = max(cs.fsmHolds, index)
	cs.mu.Unlock()
	return false, nil
}

// Status is what /readyz and the metrics tell of the Raft group.
type Status struct {
	Configuration uint64        // the newest applied configuration's number
	Leader        string        // the leader's id, "" when none is known
	Voters        int           // voters in Raft's configuration
	Voter         bool          // this node is one of them
	IsLeader      bool          // this node leads
	CommitLatency time.Duration // the leader's last configuration commit
}

func (cs *consensus) status() Status {
	_, id := cs.raft.LeaderWithID()
	st := Status{Configuration: cs.fsm.current().Number, Leader: string(id), IsLeader: cs.raft.State() == raft.Leader}
	if f := cs.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				st.Voters++
				st.Voter = st.Voter || string(s.ID) == cs.c.cfg.Self.ID
			}
		}
	}
	cs.mu.Lock()
	st.CommitLatency = cs.commitLat
	cs.mu.Unlock()
	return st
}

// apply commits the next configuration (on the leader).
func (cs *consensus) apply(members []NodeMeta, replicas int) error {
	b, err := msgpack.Marshal(configCommand{Replicas: replicas, Members: members})
	if err != nil {
		return err
	}
	start := time.Now()
	if err := cs.raft.Apply(b, 5*time.Second).Error(); err != nil {
		return fmt.Errorf("cluster: commit configuration: %w", err)
	}
	cs.mu.Lock()
	cs.commitLat = time.Since(start)
	cs.mu.Unlock()
	return nil
}

// gossipSeeds are the gossip addresses of the newest configuration's
// members: a restarted node rejoins them without --join.
func (cs *consensus) gossipSeeds() []string {
	var out []string
	for _, m := range cs.fsm.current().Members {
		if m.Gossip != "" {
			out = append(out, m.Gossip)
		}
	}
	return out
}

func (cs *consensus) poke() {
	select {
	case cs.kick <- struct{}{}:
	default:
	}
}

// close stops Raft; safe twice.
func (cs *consensus) close() error {
	cs.closeOnce.Do(func() {
		// Every verification under way is answered by the live Raft
		// first; none starts after (see verified).
		cs.verifyMu.Lock()
		cs.closing = true
		cs.verifyMu.Unlock()
		err := cs.raft.Shutdown().Error()
		cs.closeErr = errors.Join(err, cs.trans.Close(), cs.stream.Close(), cs.store.Close())
	})
	return cs.closeErr
}

// slogWriter takes hclog's lines to slog at debug level: Raft's own
// chatter (heartbeats failing while a peer is down) is for debugging;
// what an operator needs (leader changes, configurations) the cluster
// logs itself.
type slogWriter struct{ l *slog.Logger }

var _ io.Writer = slogWriter{}

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug(strings.TrimSpace(string(p)))
	return len(p), nil
}

// waitCommitted blocks until committed succeeds or ctx ends.
func (cs *consensus) waitCommitted(ctx context.Context) (Configuration, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		cfg, err := cs.committed()
		if err == nil {
			return cfg, nil
		}
		select {
		case <-ctx.Done():
			return cfg, fmt.Errorf("%w (%v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// gossipAddrs gives Raft a peer's address as gossip knows it now: a node
// restarted on another address (port 0, a new pod IP) is reachable
// before the leader has written its new address into Raft's
// configuration — after a whole-cluster restart, before there is one.
type gossipAddrs struct{ c *Cluster }

func (g gossipAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	g.c.mu.RLock()
	m, ok := g.c.view[string(id)]
	g.c.mu.RUnlock()
	if !ok || m.LinkAddr == "" {
		return "", fmt.Errorf("cluster: %s is not in the gossip view", id)
	}
	return raft.ServerAddress(m.LinkAddr), nil
}
