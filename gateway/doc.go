// Package gateway is a node's front door: the HTTP server, the WebSocket
// wire protocol of PROTOCOL.md, token checks, the limits on bad input, and
// routing each connection to its session's owner through a Backend (this
// node's registry, or the cluster). It holds no session state: every frame
// is passed to the session's actor through an actor.Session, and every
// answer comes back through the connection's bounded queue.
//
// Reading it top-down: server.go (the Server, its Config, the Backend),
// http.go (the HTTP routes), conn.go (one connection: its queue and its
// writer), read.go (the reader goroutine), decode.go (a frame's bytes to
// a wire.ClientFrame: one table of each type's own fields, a fast pass
// for valid frames and a slower one that says what is wrong), hello.go
// (the first frame: resume or create; the writer is held while it opens
// the session, so a resume's session frame and history_batch leave in one
// write), auth.go (tokens; the claims of the last 1,024 verified tokens
// are remembered by their exact text, their times checked on every use),
// dispatch.go (every frame after it), wire.go (what the actor says, as
// frames).
//
// The speed tricks live apart, each with its invariant in its doc, so the
// protocol code reads without them: internal/cork (the socket: corked
// writes, one write per batch; idle sockets parked in one epoll set),
// internal/jsonenc (the frames sent most, written without reflection),
// internal/flatjson (the frames received most, decoded without
// reflection). A connection costs little while idle: its socket is
// parked in the server's poller (cork) with no goroutine of its own;
// what arrives is handled on one of the server's parked goroutines
// (actor/workers), whose stacks have grown already; its writer exists
// only while frames are queued.
//
// Subpackages: wire (frame types and codes, shared with clients), client
// (the Go client library), web (the demo page), node (how a node is
// assembled); for tests only, node/nodetest (an in-process node and its
// tokens, as httptest is for net/http), faultnet (a failing network),
// wstest (a raw WebSocket client) and tlstest (certificates).
//
// The exported surface:
//
//   - Server, New, Config, Metrics, NewMetrics: the server.
//   - Backend, Local, Clustered: what it routes sessions to.
//   - Issue, TokenSpec, Verify, Identity, Claims, Leeway, MaxUserLen:
//     tokens.
//   - DecodeFrame, EncodeFrame, MessageOf, PendingOf, MaxSendIDLen: frames
//     (EncodeFrame is shared with the cluster's forwarding).
//   - CertFiles, NewCertFiles, ErrBadCert: TLS from files, reloaded.
//   - ErrUnauthorized, ErrInvalidPayload, ErrUnavailable: what callers
//     branch on.
package gateway
