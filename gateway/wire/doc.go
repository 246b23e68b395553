// Package wire is the Tether wire protocol as Go types: the frame types,
// error codes and close codes of PROTOCOL.md, and the JSON shape of every
// frame. It is shared by the server (package gateway) and the Go client
// (package gateway/client), and imports nothing but the standard library,
// so a client links neither the store nor the server.
//
// The exported surface:
//
//   - Type*: frame types; Code*: the codes of error frames; Close*:
//     WebSocket close codes; Reason*: why a session frame was or was not
//     resumed; Role*: entry roles; AttachShared: the hello's shared attach.
//   - ClientFrame: any frame a client sends; StreamMark: the hello's note
//     of a partly received streamed reply.
//   - SessionFrame, PendingTool, Message, Ack, Delta, HistoryBatch,
//     ContextFrame, CompletedFrame, Pong, ErrorFrame: the frames a server
//     sends.
//   - Snapshot: the body of GET /v1/sessions/{id}.
package wire
