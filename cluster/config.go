package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"
)

var (
	// ErrInsecureBind is returned by NewMembership when gossip would leave
	// the host unencrypted: an empty Secret with a non-loopback Bind.
	ErrInsecureBind = errors.New("cluster: an empty secret is only allowed with a loopback bind address")
	// ErrDuplicateID is returned by NewMembership when a live member
	// already uses this node's id.
	ErrDuplicateID = errors.New("cluster: node id already in use by another member")
)

// NodeMeta is what a node tells the others about itself through gossip.
type NodeMeta struct {
	ID         string `msgpack:"id"`
	ClientAddr string `msgpack:"client"` // host:port of the HTTP+WS listener
	LinkAddr   string `msgpack:"link"`   // host:port where the node link (and Raft) is served
	// Expect is the node's --bootstrap-expect, so nodes without Raft state
	// agree on who forms the first group; HasState says it has Raft state
	// (it is or was in a group: no one bootstraps with it).
	Expect   int  `msgpack:"x,omitempty"`
	HasState bool `msgpack:"hs,omitempty"`
	// Gossip is the member's gossip address, filled in by the Raft leader
	// in a committed Configuration (a restarted node rejoins there); empty
	// in gossip itself.
	Gossip string `msgpack:"g,omitempty"`
}

// Timing is a set of memberlist timeouts; pick a preset. The zero value
// means LANTiming.
type Timing struct {
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	GossipInterval          time.Duration
	GossipNodes             int
	PushPullInterval        time.Duration
	TCPTimeout              time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	IndirectChecks          int
	RetransmitMult          int
	GossipToTheDeadTime     time.Duration
	// Rejoin is the default MembershipConfig.RejoinInterval.
	Rejoin time.Duration
	// RaftHeartbeat and RaftElection are Raft's heartbeat and election
	// timeouts (a leader's failure is noticed after about one of them),
	// RaftLease its leader lease; zero means Raft's defaults (1 s, 1 s,
	// 500 ms).
	RaftHeartbeat, RaftElection, RaftLease time.Duration
	// RaftLeaderWait is how long a request that needs the committed
	// configuration (a session's claim or creation) waits for a Raft
	// leader while one is being elected, before it is answered
	// unavailable. Zero means twice a heartbeat and an election timeout:
	// about as long as replacing a dead leader takes.
	RaftLeaderWait time.Duration
}

func timingFrom(c *memberlist.Config, rejoin time.Duration) Timing {
	return Timing{
		ProbeInterval:           c.ProbeInterval,
		ProbeTimeout:            c.ProbeTimeout,
		GossipInterval:          c.GossipInterval,
		GossipNodes:             c.GossipNodes,
		PushPullInterval:        c.PushPullInterval,
		TCPTimeout:              c.TCPTimeout,
		SuspicionMult:           c.SuspicionMult,
		SuspicionMaxTimeoutMult: c.SuspicionMaxTimeoutMult,
		IndirectChecks:          c.IndirectChecks,
		RetransmitMult:          c.RetransmitMult,
		GossipToTheDeadTime:     c.GossipToTheDeadTime,
		Rejoin:                  rejoin,
	}
}

// LANTiming is memberlist's LAN configuration: a crashed node is declared
// dead after ~5 s.
func LANTiming() Timing { return timingFrom(memberlist.DefaultLANConfig(), 10*time.Second) }

// LocalTiming is memberlist's local (loopback) configuration.
func LocalTiming() Timing { return timingFrom(memberlist.DefaultLocalConfig(), 10*time.Second) }

// TestTiming is for tests on loopback: a crashed node is declared dead in
// about a second, and seeds are re-joined every 500 ms.
func TestTiming() Timing {
	return Timing{
		ProbeInterval:           100 * time.Millisecond,
		ProbeTimeout:            80 * time.Millisecond,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		PushPullInterval:        time.Second,
		TCPTimeout:              500 * time.Millisecond,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 2,
		IndirectChecks:          1,
		RetransmitMult:          3,
		GossipToTheDeadTime:     time.Second,
		Rejoin:                  500 * time.Millisecond,
		RaftHeartbeat:           300 * time.Millisecond,
		RaftElection:            300 * time.Millisecond,
		RaftLease:               150 * time.Millisecond,
	}
}

func (t Timing) apply(c *memberlist.Config) {
	c.ProbeInterval = t.ProbeInterval
	c.ProbeTimeout = t.ProbeTimeout
	c.GossipInterval = t.GossipInterval
	c.GossipNodes = t.GossipNodes
	c.PushPullInterval = t.PushPullInterval
	c.TCPTimeout = t.TCPTimeout
	c.SuspicionMult = t.SuspicionMult
	c.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	c.IndirectChecks = t.IndirectChecks
	c.RetransmitMult = t.RetransmitMult
	c.GossipToTheDeadTime = t.GossipToTheDeadTime
	// A crashed node restarting on another address may take its name back
	// once it is dead; a live holder of the name is never displaced.
	c.DeadNodeReclaimTime = t.ProbeInterval
}

// MembershipConfig configures NewMembership.
type MembershipConfig struct {
	// Self is this node; Self.ID is its memberlist name and must be unique
	// in the cluster.
	Self NodeMeta
	// Bind is the gossip host:port (TCP and UDP), e.g. 127.0.0.1:7946;
	// port 0 picks a free port (see Membership.Addr). Default
	// 0.0.0.0:7946. With Transport set, Bind only decides whether an empty
	// Secret is allowed: give the transport's address.
	Bind string
	// Advertise is the host:port other nodes reach this node at; default:
	// the bound address (with 0.0.0.0, a private IP of the host).
	Advertise string
	// Seeds are host:port of nodes to join; host names are allowed.
	Seeds []string
	// Secret encrypts gossip with an AES-256 key derived from it. Empty
	// means no encryption, allowed only on a loopback Bind.
	Secret string
	// Timing is a preset (LANTiming, LocalTiming, TestTiming); zero means
	// LANTiming.
	Timing Timing
	// MoreSeeds, if set, adds addresses to join at every rejoin: the
	// cluster gives the gossip addresses of the members of its committed
	// configuration, so a restarted node finds its peers without seeds.
	MoreSeeds func() []string
	// RejoinInterval is how often the seeds are joined again, so a healed
	// partition merges back. Default Timing.Rejoin.
	RejoinInterval time.Duration
	// OnChange, if set, is called from one goroutine, in order, with the
	// new member list (as Members returns it) whenever the set of members
	// or a member's state or metadata changes, and once at start.
	OnChange func(members []Member)
	// Transport replaces memberlist's UDP+TCP transport (tests wrap one in
	// a clustertest.FaultyTransport). The Membership owns it: Close shuts it down, as
	// does NewMembership when it fails.
	Transport memberlist.Transport
	// Logger defaults to slog.Default(). memberlist's own log goes to it
	// at debug level.
	Logger *slog.Logger
}

func (c MembershipConfig) withDefaults() MembershipConfig {
	if c.Bind == "" {
		c.Bind = "0.0.0.0:7946"
	}
	if c.Timing.ProbeInterval == 0 {
		c.Timing = LANTiming()
	}
	if c.RejoinInterval <= 0 {
		c.RejoinInterval = c.Timing.Rejoin
	}
	if c.RejoinInterval <= 0 {
		c.RejoinInterval = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// memberlistConfig turns c (with defaults) into memberlist's configuration.
func (c MembershipConfig) memberlistConfig(meta []byte) (*memberlist.Config, error) {
	if c.Self.ID == "" {
		return nil, errors.New("cluster: Self.ID is required")
	}
	if len(meta) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("cluster: node meta is %d bytes, over memberlist's %d", len(meta), memberlist.MetaMaxSize)
	}
	ip, port, err := resolveHostPort(c.Bind)
	if err != nil {
		return nil, fmt.Errorf("cluster: bind %q: %w", c.Bind, err)
	}
	if c.Secret == "" && !ip.IsLoopback() {
		return nil, fmt.Errorf("%w (bind %s)", ErrInsecureBind, c.Bind)
	}
	mc := memberlist.DefaultLANConfig()
	c.Timing.apply(mc)
	mc.Name = c.Self.ID
	mc.BindAddr = ip.String()
	mc.BindPort = port
	mc.AdvertisePort = port
	if c.Advertise != "" {
		aip, aport, err := resolveHostPort(c.Advertise)
		if err != nil {
			return nil, fmt.Errorf("cluster: advertise %q: %w", c.Advertise, err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = aip.String(), aport
	}
	if c.Secret != "" {
		mc.SecretKey = deriveKey(gossipKeyLabel, c.Secret)
	}
	mc.Transport = c.Transport
	mc.Logger = memberlistLogger(c.Logger)
	return mc, nil
}

const (
	gossipKeyLabel = "tether/cluster/gossip-aes256/v1"
	linkKeyLabel   = "tether/cluster/link-hmac-sha256/v1"
)

// deriveKey turns a shared secret into a 32-byte key for one use; the label
// keeps the gossip key and the link key apart.
func deriveKey(label, secret string) []byte {
	h := sha256.New()
	h.Write([]byte(label))
	h.Write([]byte{0})
	h.Write([]byte(secret))
	return h.Sum(nil)
}

func encodeMeta(m NodeMeta) ([]byte, error) {
	b, err := msgpack.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode node meta: %w", err)
	}
	return b, nil
}

func decodeMeta(b []byte) (NodeMeta, error) {
	var m NodeMeta
	if err := msgpack.Unmarshal(b, &m); err != nil {
		return NodeMeta{}, fmt.Errorf("cluster: decode node meta: %w", err)
	}
	return m, nil
}

// resolveHostPort parses host:port, resolving a host name to its first IP.
func resolveHostPort(hostport string) (net.IP, int, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return nil, 0, fmt.Errorf("bad port %q", ps)
	}
	if host == "" {
		return net.IPv4zero, port, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip, port, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
	if err != nil {
		return nil, 0, err
	}
	for _, ip := range ips { // prefer IPv4, as memberlist's defaults do
		if ip.To4() != nil {
			return ip, port, nil
		}
	}
	return ips[0], port, nil
}

// isLoopbackHost reports whether host (of a host:port) is a loopback
// address or "localhost", without resolving other names.
func isLoopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
