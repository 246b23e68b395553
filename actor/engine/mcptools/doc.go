// Package mcptools gives the openai engine the tools of MCP servers
// (Model Context Protocol, over the streamable HTTP transport): a Set is
// an llm.ToolSource, so each of the model's steps is offered the
// tools the servers offer at that moment, and each call the model asks
// for is journaled by the actor like any tool call (started before it
// runs, its result after). A call asks for progress notifications; the
// newest one is kept as the pending call's partial result, as a built-in
// tool's progress is.
//
// What a tool's annotations say decides what a crash and a call do (the
// MCP defaults, as the specification states them, apply to a hint that is
// not given: readOnlyHint false, idempotentHint false, destructiveHint
// true):
//
//   - readOnlyHint: idempotent (a call a crash cut short is run again);
//     no other hint counts, as the specification says.
//   - otherwise destructiveHint (true, or not given): the call needs the
//     user's approval: it is logged awaiting_approval and sent only once
//     the user approves it (PROTOCOL.md, approve); a denied call is never
//     sent. A server must say destructiveHint: false for its writing tools
//     to run unasked; this follows the specification's default literally,
//     as a tool that does not say what it does is not run unasked.
//   - otherwise idempotentHint: idempotent; without it the call is run at
//     most once, and one a crash cut short is logged failed "interrupted".
//
// Servers are listed at start and again on each
// notifications/tools/list_changed. New waits a little (StartWait) for
// each server's first answer, so that calls a crash left pending find
// their tools; a server that does not answer then is not an error: it is
// retried in the background with backoff until it answers, and until then
// its tools are left out of what the model is offered, and the system
// prompt says which servers cannot be reached. Leaving them out, rather
// than offering tools that fail, keeps the model from spending steps on
// calls that cannot succeed, and lets it tell the user what it cannot do
// now. A server found unreachable later (its connection breaks, or a call
// fails and a ping finds it gone) is treated the same way; a call for one
// of its tools that the model still makes fails with "MCP server NAME is
// unavailable".
//
// A tool keeps its own name when that is unambiguous and valid for
// OpenAI (^[a-zA-Z0-9_-]{1,64}$, other characters becoming _). When two
// servers offer the same name, or a server offers one of the engine's
// own tools' names (Config.Reserved), each server's tool is called
// SERVER_TOOL instead.
//
// Its tests, and the command's, run real MCP servers from package
// mcptest.
//
// The exported surface:
//
//   - Set, New, Config: the tools of a list of servers, kept up to date
//     in the background (OpenAITools, OpenAITool: an llm.ToolSource;
//     Close).
//   - Server: one MCP server to take tools from: its name, URL and the
//     headers sent with every request.
//   - Declare: what a tool's annotations make of its calls (idempotent,
//     needs approval), by the rules above.
//   - CheckURL: what is wrong with a server URL, without repeating it (it
//     may hold credentials).
package mcptools
