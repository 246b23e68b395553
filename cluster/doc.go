// Package cluster owns what nodes share: who is alive (Membership, gossip),
// the committed cluster Configuration (a Raft group), which node owns and
// which nodes replicate a session under it (Placement), and the
// authenticated node-to-node Link that carries calls and streams.
// Forwarding client traffic and replicating log entries are built on
// these; the package never parses client frames. It
// may pass some on: the owner of a session encodes its history batches
// with the gateway's encoder (Config.EncodeFrame) for a client attached
// through another node, whose gateway queues the bytes as they are.
//
// # Placement
//
// Placement maps a session id to a partition (xxhash of the id modulo
// Partitions) and a partition to its owner with consistent hashing
// (github.com/buraksezer/consistent). A partition's replicas are its owner
// followed by its next owners: the owner it would have with the current
// owner removed from the member set, then with that one removed too, and so
// on (consistent.GetClosestN does not predict failover). Load bounds are
// off by default because they break the invariant below.
//
// Invariant (TestFailoverInvariant): after any single member leaves or
// fails, the new owner of every session is one of its current replicas
// (R >= 2), and the surviving replicas stay, in order, at the head of its
// new replica list. So a crash hands a session to a node that already
// holds its log, and only one new replica has to be caught up. Two changes
// in a row void it: the new owner must still ask the previous replicas for
// their newest seq before it writes. All nodes must use the same
// PlacementConfig (and library versions: TestPlacementGolden pins the
// table).
//
// # Membership
//
// Membership runs hashicorp/memberlist: NodeMeta (id, client and link
// addresses) rides in the gossip node meta, gossip is encrypted with a key
// derived from the shared secret, seeds are re-joined periodically so a
// healed partition merges back, and a second node with a live node's id is
// refused. memberlist does not expose its suspect state, so each node pings
// the members itself (one UDP ping each per probe interval) and reports a
// member that missed two in a row as MemberSuspect until gossip declares it
// dead. (Tests cut gossip with package clustertest.)
//
// # Link
//
// Link keeps one WebSocket per peer address it calls (a peer's calls to
// this node come over the connection that peer dialed), authenticated both
// ways by HMAC-SHA256 over nonces from both sides and both node ids, with
// a key derived from the same secret under another label. Calls and
// streams are multiplexed by id; all that is queued goes out as one
// WebSocket message. Streams have no flow control: a receiver whose buffer
// fills is reset (ErrOverflow) rather than stall the connection, so a
// sender must bound what it sends ahead of acknowledgements.
//
// With a secret the link and Raft run over mutual TLS 1.3 (link_tls.go).
// Every node derives one Ed25519 key from the secret, and a peer is
// admitted when its certificate carries that key. Certificate files and a
// CA may be given instead. Peers ask for the ALPN protocol LinkALPN. That
// is how the node's shared listener (the gateway's) picks the link's
// configuration, and why it refuses the link's paths on any other
// connection. Without a secret the link is plain text, allowed only
// between loopback addresses.
//
// # Configurations: gossip detects, Raft decides
//
// A Raft group (hashicorp/raft; consensus.go, leader.go) commits numbered
// configurations: the members that own and hold sessions, and R. Its
// leader reconciles the gossip view into them, as Consul's leader does
// with serf: a member gossip declares dead leaves the configuration (and
// stays a voter, until it has been gone for ten settle times while a live
// non-voter can take its vote: then it is demoted and the non-voter
// promoted, as Consul's autopilot does); one that left gracefully leaves
// Raft too; a new one is
// added as a voter (up to five) once its node link answers the leader's
// probe, and a member whose link misses three probes is left out. A link
// broken between two other members is reported by the owner whose replica
// does not answer (reports.go); the leader leaves one of the pair out for
// a while. Raft's
// log and stable store live on a Pebble of their own in the data
// directory (raft_store.go); its RPCs ride the HTTP listener at /v1/raft
// (raft_stream.go). A node decides nothing from its own view: placement
// is computed over the newest configuration it has applied, and it claims
// a session only under one it has caught up with (Raft's read index:
// readindex.go), counted by what its FSM holds: Raft's AppliedIndex
// counts entries handed to the FSM's goroutine, not applied by it. While
// a leader is being elected it waits (Timing.RaftLeaderWait) rather than
// failing at once: an election is a pause, not an outage.
//
// # Ownership changes
//
// An owner epoch is the configuration's number << 20 plus a claim count:
// only one node owns a session under a configuration, so an epoch names
// one owner, and newer configurations' epochs are above older ones'. A
// claim (claim.go) fences the copies first (wal.Log.Fence: from then on
// they refuse the old epoch, so the old owner can acknowledge nothing
// more), reads their heads after the fence, and fences more nodes until
// every configuration since the session was last written or settled
// (wal.Header.Settled) has an answering member of its write set — every
// acknowledged entry is on all of its write set, so none can then be
// missed; a write set none of whose members answers leaves the session
// unavailable. A node refuses a fence from a claim taken under a
// configuration that a newer one it holds gives to another owner
// (Cluster.overtaken): such a claimant read an old configuration, and its
// cover would miss what the owner in between wrote. The claim pulls the
// newest copy and catches every current replica up before the session is
// served (a failed append may have left entries here alone; they are
// shown only once all replicas hold them). Claims of one session on one
// node run one at a time (journal.exclusive): an epoch names one owner,
// not one claim, and two claims at once there would both hold it, one's
// pull truncating what the other had just read as its log. An actor
// another node may have owned in between (this node was paused or cut
// off, then came back as owner) is stopped before it serves a hello, and
// its replicator ships nothing more: a copy it caught up would be marked
// complete as of the newest configuration (Settled) while missing what
// the owner in between acknowledged, and a later claim trusting that mark
// would skip the write sets that hold those entries.
// An entry is acknowledged only when all R replicas of the configuration
// stored it; a replica that does not answer within ForwardFor fails the
// append (unavailable, 1013). After each configuration change, sessions
// whose write set changed are re-replicated in the background
// (rereplicate.go), so R copies hold over time.
//
// # Exported surface
//
//   - Cluster, New, Config: a node's part in the cluster (Attach,
//     WaitReady, Ready, Resume, Create, Snapshot, Journal, Owns, NewID,
//     Members, Configuration, Handler, LinkTLS, GossipAddr, Stats, Leave,
//     Close).
//   - Configuration: a committed configuration (IDs, Member); Stats and
//     Status: a node's counters and what it knows of the Raft group, for
//     /readyz and the metrics.
//   - Placement, NewPlacement, PlacementConfig, DefaultReplicationFactor:
//     session ids to partitions, owners and replicas (Owner, Replicas,
//     Partition, PartitionOwner, PartitionReplicas, Members, Contains,
//     Config, Warm).
//   - Membership, NewMembership, MembershipConfig, Member, MemberState
//     (MemberAlive, MemberSuspect), NodeMeta: gossip (Members, Member,
//     Self, Left, Addr, Leave, Close).
//   - Timing, LANTiming, LocalTiming, TestTiming: failure-detection
//     presets.
//   - Link, NewLink, LinkConfig, Stream, Op: the node link (Call, Open,
//     Handler, PeerID, Close) and its streams (Send, Recv, Close, Done,
//     Method, Peer).
//   - LinkTLS, NewLinkTLS, LinkTLSConfig, LinkALPN: the link's TLS.
//   - FrameConn: a client connection that also takes frames the session's
//     owner encoded.
//   - RemoteError, WithCode, ErrorCode: errors carried across the link,
//     with a code.
//   - FreeLocalAddr: a loopback address with a free port, for tests and
//     `tether bench --local`.
//   - ErrUnavailable, and ErrNoConfiguration, ErrNoLeader, ErrCatchingUp,
//     ErrNotMember: a session or the configuration cannot be served now.
//   - ErrLinkDown, ErrClosed, ErrOverflow, ErrReset, ErrAuth, ErrTooLarge,
//     ErrLinkTLS: how calls and streams on the link fail, and link TLS
//     settings that cannot be used.
//   - ErrInsecureBind, ErrDuplicateID: gossip refused at start.
package cluster
