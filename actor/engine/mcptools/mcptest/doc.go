// Package mcptest runs real MCP servers for tests: the go-sdk's server
// over its streamable HTTP handler, on 127.0.0.1, counting the calls of
// each tool. It is test support only, for the tests of package mcptools
// and of the tether command.
//
// The exported surface:
//
//   - Server, Start, StartAt: a running server, closed when the test ends
//     (Tool, Calls, RequireHeader, Addr, Close; its URL and the embedded
//     *mcp.Server).
//   - Handler: what runs one call of a tool, numbered from 1.
//   - Text, Progress, Bool: a result of one text part, a progress
//     notification from inside a Handler, and a pointer for an
//     annotation's hint.
package mcptest
