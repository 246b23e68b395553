package cluster

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// PlacementConfig tunes the consistent-hash ring. Every node of a cluster must
// use the same values, or they disagree on owners.
type PlacementConfig struct {
	// Partitions is how many partitions session ids hash into (default 271).
	Partitions int
	// ReplicationFactor is how many virtual nodes each member has on the
	// ring (default 100). More virtual nodes even out the partitions per
	// member; with Load unbounded, 20 left one member of nine with 1.79×
	// the average, 100 with 1.39× (271 partitions).
	ReplicationFactor int
	// Load, when >= 1, bounds a member's partitions to Load × the average
	// (consistent hashing with bounded loads). The default, 0, is
	// unbounded: bounded loads move partitions between surviving members
	// when any member leaves, which breaks the failover invariant (see
	// doc.go) for about 1 partition in 100 per failure. Values in (0, 1)
	// are raised to 1.
	Load float64
}

// DefaultReplicationFactor is PlacementConfig.ReplicationFactor's default.
const DefaultReplicationFactor = 100

func (c PlacementConfig) withDefaults() PlacementConfig {
	if c.Partitions <= 0 {
		c.Partitions = consistent.DefaultPartitionCount
	}
	if c.ReplicationFactor <= 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	switch {
	case c.Load <= 0:
		c.Load = 0
	case c.Load < 1:
		c.Load = 1
	}
	return c
}

type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

type ringMember string

func (m ringMember) String() string { return string(m) }

// Placement is an immutable view of which member owns which session id,
// for one member set. Replica chains are computed on first use and cached,
// so a Placement is safe for concurrent use and cheap per call.
type Placement struct {
	cfg     PlacementConfig
	members []string       // sorted, distinct
	index   map[string]int // member → position in members
	owners  []int          // partition → index of its owner in members

	// chains[p] holds the longest replica chain of partition p computed so
	// far (indexes into members); the fast path reads it without a lock.
	chains []atomic.Pointer[[]int]

	mu    sync.Mutex
	rings map[string][]int // member subset (bitset) → partition owners
}

// NewPlacement builds the placement of members (node ids; order and
// duplicates do not matter).
func NewPlacement(members []string, cfg PlacementConfig) *Placement {
	cfg = cfg.withDefaults()
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	p := &Placement{
		cfg:     cfg,
		members: ms,
		index:   make(map[string]int, len(ms)),
		chains:  make([]atomic.Pointer[[]int], cfg.Partitions),
		rings:   make(map[string][]int),
	}
	for i, m := range ms {
		p.index[m] = i
	}
	if len(ms) > 0 {
		all := make([]bool, len(ms))
		for i := range all {
			all[i] = true
		}
		p.owners = p.ring(all)
	}
	return p
}

// Config returns the configuration in effect (defaults applied).
func (p *Placement) Config() PlacementConfig { return p.cfg }

// Members returns the member set, sorted.
func (p *Placement) Members() []string { return slices.Clone(p.members) }

// Contains reports whether id is a member.
func (p *Placement) Contains(id string) bool {
	_, ok := p.index[id]
	return ok
}

// Partition returns the partition key hashes into. It does not depend on
// the member set.
func (p *Placement) Partition(key string) int {
	return int(xxhash.Sum64String(key) % uint64(p.cfg.Partitions))
}

// Owner returns the member owning key, or "" when there are no members.
func (p *Placement) Owner(key string) string {
	return p.PartitionOwner(p.Partition(key))
}

// PartitionOwner returns the member owning partition part, or "" when there
// are no members or part is out of range.
func (p *Placement) PartitionOwner(part int) string {
	if len(p.members) == 0 || part < 0 || part >= p.cfg.Partitions {
		return ""
	}
	return p.members[p.owners[part]]
}

// Replicas returns up to n distinct members for key: the owner first, then
// its next owners — the owner key's partition would have with the current
// owner removed from the member set, then with that one removed too, and so
// on. So when the owner fails, the session lands on Replicas(key, n)[1].
func (p *Placement) Replicas(key string, n int) []string {
	return p.PartitionReplicas(p.Partition(key), n)
}

// PartitionReplicas is Replicas for a partition; nil when part is out of
// range or there are no members.
func (p *Placement) PartitionReplicas(part, n int) []string {
	if len(p.members) == 0 || part < 0 || part >= p.cfg.Partitions || n <= 0 {
		return nil
	}
	n = min(n, len(p.members))
	chain := p.chain(part, n)
	out := make([]string, n)
	for i := range out {
		out[i] = p.members[chain[i]]
	}
	return out
}

// Warm computes the replica chains of every partition up to length n, so
// later calls never take the slow path (which builds a ring for a member
// subset: ~0.4 ms with 9 members). Optional; with 9 members Warm(2) takes
// ~6 ms, Warm(3) ~11 ms, so call it where the Placement is built (on a
// membership change), not on a request path.
func (p *Placement) Warm(n int) {
	if len(p.members) == 0 {
		return
	}
	for part := range p.cfg.Partitions {
		p.chain(part, min(n, len(p.members)))
	}
}

// chain returns at least n entries of part's replica chain (n <= members).
func (p *Placement) chain(part, n int) []int {
	if c := p.chains[part].Load(); c != nil && len(*c) >= n {
		return *c
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var c []int
	if cp := p.chains[part].Load(); cp != nil {
		c = slices.Clone(*cp)
	} else {
		c = []int{p.owners[part]}
	}
	if len(c) < n {
		left := make([]bool, len(p.members))
		for i := range left {
			left[i] = true
		}
		for _, m := range c {
			left[m] = false
		}
		for len(c) < n {
			next := p.ring(left)[part]
			c = append(c, next)
			left[next] = false
		}
	}
	p.chains[part].Store(&c)
	return c
}

// ring returns the partition owners (indexes into members) of the subset of
// members marked in set, which must not be empty. Caller holds mu (or is
// the constructor).
func (p *Placement) ring(set []bool) []int {
	key := subsetKey(set)
	if owners, ok := p.rings[key]; ok {
		return owners
	}
	var ms []consistent.Member
	for i, in := range set {
		if in {
			ms = append(ms, ringMember(p.members[i]))
		}
	}
	load := p.cfg.Load
	if load == 0 {
		// A bound of Partitions per member never binds.
		load = float64(len(ms)) + 1
	}
	c := consistent.New(ms, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    p.cfg.Partitions,
		ReplicationFactor: p.cfg.ReplicationFactor,
		Load:              load,
		ReplicaKey:        replicaKey,
	})
	owners := make([]int, p.cfg.Partitions)
	for part := range owners {
		owners[part] = p.index[c.GetPartitionOwner(part).String()]
	}
	p.rings[key] = owners
	return owners
}

// replicaKey builds the same bytes as consistent.DefaultReplicaKey without
// fmt, which dominated building a ring.
func replicaKey(name string, idx int) []byte {
	b := make([]byte, 0, len(name)+4)
	b = strconv.AppendInt(b, int64(idx), 10)
	b = append(b, ':')
	return append(b, name...)
}

func subsetKey(set []bool) string {
	b := make([]byte, (len(set)+7)/8)
	for i, in := range set {
		if in {
			b[i/8] |= 1 << (i % 8)
		}
	}
	return string(b)
}
