package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Reports of a broken link between two members. The leader's own probes
// (leader.go, probeAll) find a member whose link answers no one. They
// cannot find a link broken between two other members: gossip and the
// leader reach both, so both stay in the configuration, and the owner of
// a session whose replica it cannot reach could never acknowledge a write
// to it (replicate gives up after ForwardFor, the next claim's fence
// fails the same way, for as long as the cut lasts). So the owner reports
// the replica to the leader, and the leader leaves one of the two out of
// the next configuration for reportHold; the session's placement then
// names replicas the owner can reach. After the hold the member is back,
// and a link still broken is reported again.

// reportEvery is how often a node reports the same member, at most.
const reportEvery = time.Second

// reportReq is methodReport's body: the sender's link to About failed.
type reportReq struct {
	About string
}

// reports is the state of both sides: what this node reported when (to
// rate-limit), and, on the leader, the reports it holds.
type reports struct {
	mu   sync.Mutex
	sent map[string]time.Time  // member → when this node last reported it
	held map[[2]string]heardAt // (from, about) → when the leader heard it
	out  map[string]bool       // left out of the configuration for a report (for logs)
	now  func() time.Time      // time.Now
}

// heardAt is when the leader first and last heard of a pair: a pair
// counts once its reports have gone on for the leader's settle time, so
// that a link still dialing (a node just joined, a moment of overload)
// leaves no one out.
type heardAt struct{ first, last time.Time }

func newReports() *reports {
	return &reports{sent: map[string]time.Time{}, held: map[[2]string]heardAt{}, out: map[string]bool{}, now: time.Now}
}

// reportUnreachable tells the Raft leader that this node's link to member
// id failed (err), at most once per reportEvery per member. It does not
// wait: the call runs on a goroutine the cluster owns.
func (c *Cluster) reportUnreachable(id string, err error) {
	if id == c.cfg.Self.ID || ErrorCode(err) != "" || !(errors.Is(err, ErrLinkDown) || errors.Is(err, context.DeadlineExceeded)) {
		return // an answer, even a refusal, proves the link works
	}
	r := c.reports
	r.mu.Lock()
	if t, ok := r.sent[id]; ok && r.now().Sub(t) < reportEvery {
		r.mu.Unlock()
		return
	}
	r.sent[id] = r.now()
	r.mu.Unlock()
	c.stats.reports.Add(1)
	c.log.Warn("link to a replica failed; reporting it to the leader", "member", id, "err", err)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		self := c.cfg.Self.ID
		switch _, leader := c.cons.raft.LeaderWithID(); string(leader) {
		case "":
		case self:
			c.cons.heard(self, id)
		default:
			if err := c.call(c.ctx, string(leader), methodReport, reportReq{About: id}, nil); err != nil {
				c.log.Debug("report to the leader", "member", id, "err", err)
			}
		}
	}()
}

// heard records, on the leader, that from cannot reach about, and wakes
// the leader's loop.
func (cs *consensus) heard(from, about string) {
	if cs.raft.State() != raft.Leader || from == about {
		return
	}
	r := cs.c.reports
	p, now := [2]string{from, about}, r.now()
	r.mu.Lock()
	h, ok := r.held[p]
	if !ok || now.Sub(h.last) > 3*reportEvery {
		h.first = now // a new run of reports
	}
	h.last = now
	r.held[p] = h
	r.mu.Unlock()
	cs.poke()
}

// reportHold is how long a reported member stays out of the
// configuration: long enough not to flap with every write, short enough
// that a healed link is used again soon.
func (cs *consensus) reportHold() time.Duration { return 10 * cs.settle() }

// reportedOut is the set of members the leader leaves out of the next
// configuration for the reports it holds (those that went on for its
// settle time), given the members that would be in it. Of each reported pair one goes: the reporter if it reported
// most of the others (its own link is the likely fault), else the member
// reported. The leader never leaves itself out, nor one of a pair when
// the other is already out.
func (cs *consensus) reportedOut(members []string) map[string]bool {
	r := cs.c.reports
	self := cs.c.cfg.Self.ID
	r.mu.Lock()
	defer r.mu.Unlock()
	hold := cs.reportHold()
	by := map[string]int{} // distinct members each reporter reported
	var pairs [][2]string
	for p, at := range r.held {
		if r.now().Sub(at.last) > hold || !slices.Contains(members, p[0]) || !slices.Contains(members, p[1]) {
			delete(r.held, p)
			continue
		}
		if at.last.Sub(at.first) < cs.settle() {
			continue // not for long enough yet
		}
		by[p[0]]++
		pairs = append(pairs, p)
	}
	slices.SortFunc(pairs, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	out := map[string]bool{}
	for _, p := range pairs {
		from, about := p[0], p[1]
		if out[from] || out[about] {
			continue
		}
		victim := about
		if about == self || (by[from] >= 2 && 2*by[from] >= len(members)-1) {
			victim = from
		}
		if victim == self {
			continue
		}
		out[victim] = true
	}
	for id := range out {
		if !r.out[id] {
			cs.log.Warn("member left out of the configuration: a member's link to it failed", "member", id, "hold", hold)
		}
	}
	r.out = out
	return out
}
