package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemberState is how this node sees a member.
type MemberState int

const (
	// MemberAlive: gossip lists the member and it answers this node's pings.
	MemberAlive MemberState = iota
	// MemberSuspect: gossip still lists the member, but this node's last
	// pings to it went unanswered. It becomes dead (and leaves the list)
	// when gossip says so, or alive again when it answers.
	MemberSuspect
)

func (s MemberState) String() string {
	switch s {
	case MemberAlive:
		return "alive"
	case MemberSuspect:
		return "suspect"
	}
	return fmt.Sprintf("MemberState(%d)", int(s))
}

// suspectAfter is how many pings in a row a member must miss to be suspect;
// one lost UDP packet must not flap it.
const suspectAfter = 2

// Member is a node in the cluster as this node sees it.
type Member struct {
	NodeMeta
	State      MemberState
	GossipAddr string // host:port of its gossip listener
}

// Membership is this node's view of the cluster, kept by memberlist gossip.
// memberlist does not expose its suspect state, so Membership pings every
// member itself once per probe interval to tell alive from suspect.
//
// The member list is copied from memberlist's join/leave/update events:
// the *Node values memberlist.Members returns are rewritten by every alive
// message, under a lock the caller cannot take (a data race).
type Membership struct {
	cfg  MembershipConfig
	log  *slog.Logger
	ml   *memberlist.Memberlist
	addr string

	poke chan struct{} // something may have changed: recompute for OnChange
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	nodes  map[string]Member    // alive and suspect members by id, State unset
	misses map[string]int       // member id → pings in a row without an answer
	left   map[string]time.Time // members that left gracefully, and when
	closed bool

	duplicate atomic.Bool // a live member at another address has our id
}

// NewMembership starts gossip on cfg.Bind and joins cfg.Seeds. A failed
// initial join is logged, not returned: the rejoin loop keeps trying.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	cfg = cfg.withDefaults()
	m := &Membership{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "membership", "node", cfg.Self.ID),
		poke:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		nodes:  make(map[string]Member),
		misses: make(map[string]int),
		left:   make(map[string]time.Time),
	}
	meta, err := encodeMeta(cfg.Self)
	var mc *memberlist.Config
	if err == nil {
		mc, err = cfg.memberlistConfig(meta)
	}
	if err != nil {
		shutdownTransport(cfg.Transport)
		return nil, err
	}
	d := &delegate{m: m, meta: meta}
	mc.Delegate, mc.Events, mc.Conflict = d, d, d
	ml, err := memberlist.Create(mc)
	if err != nil {
		shutdownTransport(cfg.Transport)
		return nil, fmt.Errorf("cluster: start gossip on %s: %w", cfg.Bind, err)
	}
	m.ml = ml
	m.mu.Lock()
	m.addr = m.nodes[cfg.Self.ID].GossipAddr // memberlist announced us in Create
	m.mu.Unlock()
	_ = m.join(true) // logged; the rejoin loop retries
	if m.duplicate.Load() {
		_ = ml.Shutdown()
		return nil, fmt.Errorf("%w: %q (seeds %v)", ErrDuplicateID, cfg.Self.ID, cfg.Seeds)
	}
	m.log.Info("gossip started", "addr", m.addr, "members", len(m.Members()))
	m.wg.Add(3)
	go m.rejoinLoop()
	go m.pingLoop()
	go m.watchLoop()
	return m, nil
}

func shutdownTransport(t memberlist.Transport) {
	if t != nil {
		_ = t.Shutdown()
	}
}

// Addr is the gossip address other nodes reach this node at.
func (m *Membership) Addr() string { return m.addr }

// Self is this node's metadata.
func (m *Membership) Self() NodeMeta { return m.cfg.Self }

// Members returns the alive and suspect members, this node included,
// sorted by ID. After Close it is the last view.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.nodes))
	for id, mb := range m.nodes {
		if id != m.cfg.Self.ID && m.misses[id] >= suspectAfter {
			mb.State = MemberSuspect
		}
		out = append(out, mb)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Member returns the member with the given id, if it is alive or suspect.
func (m *Membership) Member(id string) (Member, bool) {
	for _, mb := range m.Members() {
		if mb.ID == id {
			return mb, true
		}
	}
	return Member{}, false
}

// Leave tells the cluster this node is going (others notice within about
// a gossip round), then shuts gossip down. It waits for the leave message
// to go out until ctx's deadline (2 s without one).
func (m *Membership) Leave(ctx context.Context) error {
	if !m.markClosed() {
		return nil
	}
	timeout := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	lerr := m.ml.Leave(timeout)
	if lerr != nil {
		lerr = fmt.Errorf("cluster: leave: %w", lerr)
	}
	m.log.Info("left the cluster", "err", lerr)
	return errors.Join(lerr, m.ml.Shutdown())
}

// Left returns the members that left gracefully (and have not come back)
// since this node started, by id.
func (m *Membership) Left() map[string]time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.left)
}

// Close stops gossip without a leave message, as a crash would (others
// declare this node dead after their failure detection). Safe to call
// twice, and after Leave.
func (m *Membership) Close() error {
	if !m.markClosed() {
		return nil
	}
	return m.ml.Shutdown()
}

// markClosed stops the loops; false if already closed.
func (m *Membership) markClosed() bool {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	m.wg.Wait()
	return true
}

// join joins the seeds other than this node.
func (m *Membership) join(initial bool) error {
	self := m.Addr()
	seeds := slices.Clone(m.cfg.Seeds)
	if m.cfg.MoreSeeds != nil {
		seeds = append(seeds, m.cfg.MoreSeeds()...)
	}
	slices.Sort(seeds)
	seeds = slices.DeleteFunc(slices.Compact(seeds), func(s string) bool { return s == self || s == "" })
	if len(seeds) == 0 {
		return nil
	}
	n, err := m.ml.Join(seeds)
	switch {
	case err == nil:
		m.log.Debug("joined seeds", "contacted", n)
	case initial:
		m.log.Warn("initial join failed; retrying", "seeds", seeds, "every", m.cfg.RejoinInterval, "err", err)
	case m.ml.NumMembers() <= 1:
		m.log.Warn("rejoin failed and no other member is known", "seeds", seeds, "err", err)
	default:
		m.log.Debug("rejoin failed", "seeds", seeds, "err", err)
	}
	return err
}

func (m *Membership) rejoinLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.RejoinInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			_ = m.join(false)
		}
	}
}

// pingLoop pings every other member once per probe interval, all at once,
// and counts the unanswered pings that make a member suspect.
func (m *Membership) pingLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Timing.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.pingRound()
		}
	}
}

func (m *Membership) pingRound() {
	nodes := slices.DeleteFunc(m.Members(), func(n Member) bool { return n.ID == m.cfg.Self.ID })
	answered := make([]bool, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			_, err := m.ml.Ping(n.ID, &netAddr{n.GossipAddr})
			answered[i] = err == nil
		})
	}
	wg.Wait()
	changed := false
	m.mu.Lock()
	seen := make(map[string]int, len(nodes))
	for i, n := range nodes {
		before := m.misses[n.ID]
		now := 0
		if !answered[i] {
			now = before + 1
		}
		seen[n.ID] = now
		changed = changed || (before >= suspectAfter) != (now >= suspectAfter)
	}
	m.misses = seen
	m.mu.Unlock()
	if changed {
		m.changed()
	}
}

// netAddr is a net.Addr for memberlist.Ping, which only calls String.
type netAddr struct{ s string }

func (a *netAddr) Network() string { return "udp" }
func (a *netAddr) String() string  { return a.s }

// changed wakes the watch loop without ever blocking memberlist.
func (m *Membership) changed() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// watchLoop calls OnChange, in order, whenever Members changes; the ticker
// catches what no event announces.
func (m *Membership) watchLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Timing.ProbeInterval)
	defer t.Stop()
	var last []Member
	for first := true; ; first = false {
		if cur := m.Members(); first || !slices.Equal(cur, last) {
			last = cur
			m.log.Debug("members changed", "members", len(cur))
			if m.cfg.OnChange != nil {
				m.cfg.OnChange(cur)
			}
		}
		select {
		case <-m.stop:
			return
		case <-m.poke:
		case <-t.C:
		}
	}
}

// delegate receives memberlist's callbacks. They run under memberlist's
// locks, so they must not block.
type delegate struct {
	m    *Membership
	meta []byte
}

func (d *delegate) NodeMeta(limit int) []byte                  { return d.meta }
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}
func (d *delegate) NotifyJoin(n *memberlist.Node)              { d.m.nodeEvent(n, true) }
func (d *delegate) NotifyUpdate(n *memberlist.Node)            { d.m.nodeEvent(n, true) }
func (d *delegate) NotifyLeave(n *memberlist.Node)             { d.m.nodeEvent(n, false) }

// nodeEvent copies a node while memberlist holds its lock over it.
func (m *Membership) nodeEvent(n *memberlist.Node, alive bool) {
	var mb Member
	if alive {
		meta, err := decodeMeta(n.Meta)
		if err != nil {
			m.log.Warn("member with unreadable meta left out", "member", n.Name, "addr", n.Address(), "err", err)
			alive = false
		}
		meta.ID = n.Name // the unique name memberlist enforces
		mb = Member{NodeMeta: meta, GossipAddr: n.Address()}
	}
	m.mu.Lock()
	if alive {
		m.nodes[n.Name] = mb
		delete(m.left, n.Name)
	} else {
		delete(m.nodes, n.Name)
		delete(m.misses, n.Name)
		if n.State == memberlist.StateLeft {
			m.left[n.Name] = time.Now()
		}
	}
	m.mu.Unlock()
	m.changed()
}

// NotifyConflict: memberlist refuses a second node with a live node's name.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name == d.m.cfg.Self.ID {
		d.m.duplicate.Store(true)
		d.m.log.Error("another node uses this node's id; it is refused", "id", existing.Name, "other", other.Address())
		return
	}
	d.m.log.Error("two nodes use one id; the newcomer is refused", "id", existing.Name,
		"member", existing.Address(), "refused", other.Address())
}

// memberlistLogger sends memberlist's log lines to l at debug level: it
// logs every failed probe at ERR, which is routine in a cluster.
func memberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(mlWriter{l.With("component", "memberlist")}, "", 0)
}

type mlWriter struct{ log *slog.Logger }

func (w mlWriter) Write(p []byte) (int, error) {
	if !w.log.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	msg := strings.TrimSpace(string(p))
	level := ""
	if strings.HasPrefix(msg, "[") {
		if i := strings.IndexByte(msg, ']'); i > 0 {
			level, msg = msg[1:i], strings.TrimSpace(msg[i+1:])
		}
	}
	w.log.Debug(strings.TrimPrefix(msg, "memberlist: "), "ml_level", level)
	return len(p), nil
}
