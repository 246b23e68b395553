// Package bench will hold the load harness: simulated clients that chat,
// drop, reconnect to random nodes and verify continuity. For now it holds
// the end-to-end Go benchmarks of a node (resume latency, memory per
// session), which start real in-process nodes on 127.0.0.1.
//
// Nothing in the server imports this package.
package bench
