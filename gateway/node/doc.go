// Package node assembles one Tether node — the store, the session
// registry and the HTTP/WebSocket server (and, in a cluster, the cluster
// between the registry and the server) — in the one order they must be
// started and stopped. `tether serve`, every test that needs a real node
// and the benchmarks all build their nodes here.
//
// The exported surface:
//
//   - Node, New, Start, Config: a running node: its parts (Log, Registry,
//     Server, Metrics, Cluster), its address and id (Addr, ID, URL, HTTP),
//     Served (the server's end) and Close.
package node
