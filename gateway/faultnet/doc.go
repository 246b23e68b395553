// Package faultnet is a TCP relay that plays a failing network between a
// client and a node, for tests on 127.0.0.1: it can swallow what the
// server sends on the open connections (acks lost on the way), stop
// forwarding both ways without closing anything (a phone losing signal),
// and refuse or stall new connections until the network is back. It also
// notes which connections carried a WebSocket upgrade and when each side
// first sent a close frame on them.
//
// It is test support, shared by the client library's tests and the
// command's process tests and the demo page's browser tests; nothing in
// the server imports it.
//
// The exported surface:
//
//   - Proxy, New: the relay (Addr, URL, SetTarget, Count, Close).
//   - Mute, Swallowed, Notify, Quiet: swallowing what the server sends,
//     and telling what was swallowed and how long the server has been
//     quiet.
//   - Blackhole, SetMode, Mode (Up, Refuse, Stall): a network that stops
//     forwarding, and what new connections meet.
//   - Conn, WebSockets: the connections that carried a WebSocket upgrade,
//     and when each side first sent a close frame on one (Closes).
package faultnet
