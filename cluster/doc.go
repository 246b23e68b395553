// Package cluster owns what nodes share: who is in the cluster
// (membership), which node owns and which nodes replicate a session
// (placement), and the authenticated node-to-node link that carries calls
// and streams. Forwarding client traffic and replicating log entries are
// built on these three next.
//
// # Placement
//
// Placement maps a session id to a partition (xxhash of the id modulo
// Partitions) and a partition to its owner with consistent hashing
// (github.com/buraksezer/consistent). A partition's replicas are its owner
// followed by its next owners: the owner it would have with the current
// owner removed from the member set, then with that one removed too, and so
// on. Load bounds are off by default because they break the invariant
// below.
//
// Invariant (TestFailoverInvariant): after any single member leaves or
// fails, the new owner of every session is one of its current replicas
// (R >= 2), and the surviving replicas stay, in order, at the head of its
// new replica list. So a crash hands a session to a node that already
// holds its log, and only one new replica has to be caught up. Two changes
// in a row void it: the new owner must still ask the previous replicas for
// their newest seq before it writes.
package cluster
