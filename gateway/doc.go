// Package gateway is a node's front door: the HTTP server, the WebSocket
// wire protocol of PROTOCOL.md, token checks, the limits on bad input, and
// routing each connection to its session's owner through a Backend (local
// today, the cluster later). It holds no session state: every frame is
// passed to the session's actor, and every answer comes back through the
// connection's bounded queue.
//
// Subpackage client is the Go client library.
package gateway
