// Package clustertest is test support for clusters, as httptest is for
// net/http: a gossip transport that tests can cut (FaultyTransport).
//
// The exported surface:
//
//   - FaultyTransport, NewFaultyTransport: a memberlist transport whose
//     gossip a test cuts and heals (Block, Isolate, Heal); its other
//     methods implement memberlist.NodeAwareTransport. It is given to a
//     node as cluster.Config.Transport.
package clustertest
