// Package gateway is a node's front door: the HTTP server, the WebSocket
// wire protocol of PROTOCOL.md, token checks, the limits on bad input, and
// routing each connection to its session's owner through a Backend (this
// node's registry, or the cluster). It holds no session state: every frame
// is passed to the session's actor, and every answer comes back through the
// connection's bounded queue.
//
// A connection costs little while idle: its reader waits for the client on
// a small stack (idle.go) and handles what arrives on one of the server's
// parked goroutines (actor/workers), whose stacks have grown already; its
// writer exists only while frames are queued, on such a goroutine too, and
// puts everything queued on the wire with one write (cork.go). Flat
// client frames, the common ones, are decoded without encoding/json
// (flat.go).
//
// Subpackages: wire (frame types and codes, shared with clients), client
// (the Go client library), web (the demo page), node (how a node is
// assembled), faultnet and wstest (a failing network and a raw WebSocket
// client, for tests).
package gateway
