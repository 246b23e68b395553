// Package wstest is a raw WebSocket client for tests that speak the wire
// protocol frame by frame (gateway/PROTOCOL.md): one goroutine decodes
// every server frame into a channel, and the test waits on it with a
// timeout, as a phone's client would read. It is shared by the tests of
// gateway/node and of the tether command; the Go client library
// (gateway/client) is what applications use.
//
// The exported surface:
//
//   - Conn, Dial, DialVia: a connection (Write, MustWrite, Hello, Next,
//     Expect, Until, Frames, CloseCode, Drop, Done, Err; its URL and the
//     underlying WS).
//   - Frame: any server frame, with the fields of every type (MD reads a
//     metadata string; Raw is the frame's JSON as received).
package wstest
