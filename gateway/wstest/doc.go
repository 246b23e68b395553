// Package wstest is a raw WebSocket client for tests that speak the wire
// protocol frame by frame (gateway/PROTOCOL.md): one goroutine decodes
// every server frame into a channel, and the test waits on it with a
// timeout, as a phone's client would read. It is shared by the tests of
// gateway/node and of the tether command; the Go client library
// (gateway/client) is what applications use.
package wstest
