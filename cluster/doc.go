// Package cluster owns what nodes share: who is in the cluster
// (Membership), which node owns and which nodes replicate a session
// (Placement), and the authenticated node-to-node Link that carries calls
// and streams. Forwarding client traffic and replicating log entries are
// built on these three next; the package never parses client frames. It
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
// dead. FaultyTransport cuts gossip in tests.
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
// sender must bound what it sends ahead of acknowledgements. The link is
// authenticated, not encrypted (ws://): after the handshake, frames are
// neither secret nor integrity-protected, so keep it on a trusted network.
//
// # Ownership changes
//
// Views disagree while gossip settles, so two nodes may both believe they
// own a session. Epochs fence the loser at its next append (its replica
// is the other's next owner); on top of that, a claim waits while the
// owner a copy names is a live member that still owns or serves the
// session (released, in claim.go), a node serves a forwarded open only
// for a session it owns, and when a member its view had dropped comes
// back (a partition healed, a node restarted) a node stops the actors
// whose replicas include it, since that member may have written to them
// meanwhile. A node cut off alone still owns everything in its own view
// and acks what only it holds; gossip is not consensus.
package cluster
