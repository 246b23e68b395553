package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The leader's loop, Consul's shape: gossip tells the Raft leader who is
// alive, and the leader reconciles that into Raft's voters and into the
// committed configuration. A member gossip declares dead leaves the
// configuration (its sessions move to their replicas) but stays a voter,
// so it rejoins when it comes back; a member that left gracefully leaves
// both. Every node runs the loop; only the leader acts.

// run is the consensus goroutine: bootstrap, reconcile (when leader), and
// rejoin the configuration's members through gossip.
func (cs *consensus) run(ctx context.Context) {
	every := cs.c.cfg.Timing.Rejoin
	if every <= 0 || every > time.Second {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	wasLeader := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-cs.kick:
		case <-t.C:
		}
		cs.maybeBootstrap()
		leader := cs.raft.State() == raft.Leader
		if leader != wasLeader {
			cs.mu.Lock()
			cs.leaderSince, cs.barrierDone = time.Time{}, false
			if leader {
				cs.leaderSince = time.Now()
			}
			cs.mu.Unlock()
			cs.log.Info("raft leadership", "leader", leader)
			wasLeader = leader
		}
		if leader {
			if err := cs.reconcile(); err != nil {
				cs.log.Warn("reconcile the configuration", "err", err)
			}
		}
	}
}

// settle is how long a new leader waits before it removes a member its
// gossip does not list: right after an election (or a restart) its view
// may simply not have heard of everyone yet.
func (cs *consensus) settle() time.Duration {
	t := cs.c.cfg.Timing
	return max(2*t.PushPullInterval/10, 3*t.ProbeInterval*time.Duration(max(t.SuspicionMult, 1)), time.Second)
}

// reconcile makes Raft's servers and the committed configuration follow
// the gossip view.
func (cs *consensus) reconcile() error {
	cs.reconcileMu.Lock()
	defer cs.reconcileMu.Unlock()
	cs.mu.Lock()
	since, barrier := cs.leaderSince, cs.barrierDone
	cs.mu.Unlock()
	if !barrier {
		// The FSM holds every committed configuration before the leader
		// acts on it.
		if err := cs.raft.Barrier(5 * time.Second).Error(); err != nil {
			return fmt.Errorf("barrier: %w", err)
		}
		cs.mu.Lock()
		cs.barrierDone = true
		cs.mu.Unlock()
	}
	f := cs.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	servers := map[string]raft.Server{}
	voters := 0
	for _, s := range f.Configuration().Servers {
		servers[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	self := cs.c.cfg.Self.ID
	alive := map[string]Member{}
	for _, m := range cs.c.members.Members() {
		alive[m.ID] = m
	}
	// Graceful leaves leave Raft too.
	for id := range cs.c.members.Left() {
		if _, ok := servers[id]; ok && id != self {
			if _, back := alive[id]; !back {
				if err := cs.raft.RemoveServer(raft.ServerID(id), 0, 5*time.Second).Error(); err != nil {
					return fmt.Errorf("remove %s from raft: %w", id, err)
				}
				delete(servers, id)
				cs.log.Info("raft server removed (left)", "member", id)
			}
		}
	}
	cs.forgetLeavers(alive)
	reach := cs.probeAll(alive)
	if err := cs.demoteDead(since, servers, alive, reach, &voters); err != nil {
		return err
	}
	for id, m := range alive {
		if cs.leaving(id) {
			continue // still in gossip while it leaves: not to be added back
		}
		s, ok := servers[id]
		switch {
		case !ok || string(s.Address) != m.LinkAddr:
			// A new member (or one at a new address) starts as a
			// non-voter: a node that cannot be reached must never be
			// counted in the quorum.
			suffrage := raft.Nonvoter
			if ok {
				suffrage = s.Suffrage
			} else if reach[id].ok && voters < maxVoters {
				suffrage = raft.Voter
				voters++
			}
			var fut raft.IndexFuture
			if suffrage == raft.Voter {
				fut = cs.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(m.LinkAddr), 0, 5*time.Second)
			} else {
				fut = cs.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(m.LinkAddr), 0, 5*time.Second)
			}
			if err := fut.Error(); err != nil {
				return fmt.Errorf("add %s to raft: %w", id, err)
			}
			servers[id] = raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(m.LinkAddr), Suffrage: suffrage}
			cs.log.Info("raft server added", "member", id, "addr", m.LinkAddr, "voter", suffrage == raft.Voter)
		case s.Suffrage == raft.Nonvoter && voters < maxVoters && reach[id].ok:
			// Its link answers now: promote.
			if err := cs.raft.AddVoter(raft.ServerID(id), s.Address, 0, 5*time.Second).Error(); err != nil {
				return fmt.Errorf("promote %s: %w", id, err)
			}
			voters++
			s.Suffrage = raft.Voter
			servers[id] = s
			cs.log.Info("raft server promoted to voter", "member", id)
		}
	}
	cur := cs.fsm.current()
	var next []NodeMeta
	for id, m := range alive {
		if _, ok := servers[id]; ok && !cs.leaving(id) && (id == self || reach[id].member) {
			next = append(next, NodeMeta{ID: id, ClientAddr: m.ClientAddr, LinkAddr: m.LinkAddr, Gossip: m.GossipAddr})
		}
	}
	if time.Since(since) < cs.settle() {
		// Too early to believe an absence: keep the members not seen yet.
		for _, m := range cur.Members {
			if _, ok := alive[m.ID]; !ok && !cs.leaving(m.ID) {
				if _, ok := servers[m.ID]; ok {
					next = append(next, m)
				}
			}
		}
	}
	ids := make([]string, len(next))
	for i, m := range next {
		ids[i] = m.ID
	}
	out := cs.reportedOut(ids)
	next = slices.DeleteFunc(next, func(m NodeMeta) bool { return out[m.ID] })
	slices.SortFunc(next, func(a, b NodeMeta) int { return strings.Compare(a.ID, b.ID) })
	want := Configuration{Replicas: cs.c.cfg.Replicas, Members: next}
	if len(next) == 0 || want.sameAs(cur) {
		return nil
	}
	if err := cs.apply(next, cs.c.cfg.Replicas); err != nil {
		return err
	}
	cs.log.Info("configuration committed", "number", cs.fsm.current().Number, "members", want.IDs())
	return nil
}

// forgetLeavers forgets the leave requests of members gossip no longer
// lists (it saw them leave, or declared them dead): from then on gossip's
// own record says they left, until one comes back under the same id —
// which must then be added again, not taken for a node on its way out.
func (cs *consensus) forgetLeavers(alive map[string]Member) {
	cs.c.mu.Lock()
	defer cs.c.mu.Unlock()
	for id := range cs.c.leavers {
		if _, ok := alive[id]; !ok {
			delete(cs.c.leavers, id)
		}
	}
}

// leaving reports whether member id is leaving or has left: it asked the
// leader to let it go (leave.go) and gossip has not said goodbye yet, or
// gossip says it left (and it has not come back). Once gossip has seen
// the leave, the request is forgotten, so a node that comes back later
// under the same id is added again.
func (cs *consensus) leaving(id string) bool {
	_, left := cs.c.members.Left()[id]
	cs.c.mu.Lock()
	defer cs.c.mu.Unlock()
	if _, asked := cs.c.leavers[id]; asked {
		if left {
			delete(cs.c.leavers, id)
		}
		return true
	}
	return left
}

// reachability is what the leader's probe of a member's node link found.
type reachability struct {
	ok     bool // answered this round
	member bool // may be in the configuration: answered recently
}

// linkFailures is how many probes in a row a member's node link may miss
// before the leader leaves it out of the next configuration: gossip can
// reach a node whose link does not work, and such a node could neither
// serve its sessions nor store its replicas.
const linkFailures = 3

// probeAll asks every alive member but this node, over the node link,
// for its Raft status.
func (cs *consensus) probeAll(alive map[string]Member) map[string]reachability {
	self := cs.c.cfg.Self.ID
	out := make(map[string]reachability, len(alive))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, m := range alive {
		if id == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(cs.c.ctx, cs.probeTimeout())
			defer cancel()
			var resp statusResp
			err := cs.c.link.Call(ctx, m.LinkAddr, methodStatus, struct{}{}, &resp)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				cs.fails[id] = 0
				out[id] = reachability{ok: true, member: true}
				return
			}
			cs.fails[id]++
			_, known := cs.fsm.current().Member(id)
			out[id] = reachability{member: known && cs.fails[id] < linkFailures}
			if cs.fails[id] == linkFailures {
				cs.log.Warn("member's node link does not answer: left out of the configuration", "member", id, "err", err)
			}
		}()
	}
	wg.Wait()
	return out
}

// probeTimeout bounds the leader's probe of one member's link: a few of
// gossip's own probe timeouts, within [500 ms, 2 s].
func (cs *consensus) probeTimeout() time.Duration {
	return min(max(3*cs.c.cfg.Timing.ProbeTimeout, 500*time.Millisecond), 2*time.Second)
}

// deadVoterAfter is how long a voter gossip does not list keeps its vote
// while a live non-voter could take it.
func (cs *consensus) deadVoterAfter() time.Duration { return 10 * cs.settle() }

// demoteDead gives the vote of a voter gossip has not listed for
// deadVoterAfter to a live non-voter (Consul's autopilot does the same):
// with five voters and one gone for good the quorum would otherwise rest
// on four forever, and a second failure would stop every configuration
// change. The dead voter is demoted here; the loop in reconcile promotes
// the non-voter. Without a live non-voter to take its place a dead voter
// keeps its vote (demoting it would shrink the group, not heal it), and
// one that comes back is a non-voter until a vote is free.
func (cs *consensus) demoteDead(since time.Time, servers map[string]raft.Server, alive map[string]Member, reach map[string]reachability, voters *int) error {
	for id := range cs.missing {
		if s, ok := servers[id]; !ok || s.Suffrage != raft.Voter {
			delete(cs.missing, id)
		}
	}
	standby := 0
	for id, s := range servers {
		if _, ok := alive[id]; ok && s.Suffrage == raft.Nonvoter && reach[id].ok && !cs.leaving(id) {
			standby++
		}
	}
	now := time.Now()
	for id, s := range servers {
		if _, ok := alive[id]; ok || s.Suffrage != raft.Voter || id == cs.c.cfg.Self.ID {
			delete(cs.missing, id)
			continue
		}
		first, seen := cs.missing[id]
		if !seen || first.Before(since) {
			// Counted from this leader's own first sight of the absence.
			cs.missing[id] = now
			continue
		}
		if standby == 0 || now.Sub(first) < cs.deadVoterAfter() {
			continue
		}
		if err := cs.raft.DemoteVoter(raft.ServerID(id), 0, 5*time.Second).Error(); err != nil {
			return fmt.Errorf("demote %s: %w", id, err)
		}
		s.Suffrage = raft.Nonvoter
		servers[id] = s
		*voters--
		standby--
		delete(cs.missing, id)
		cs.log.Info("raft voter demoted: gossip has not listed it", "member", id, "for", now.Sub(first).Round(time.Second))
	}
	return nil
}
