// Package engine is the contract between a session and its agent, and
// the engines that need nothing but Go: the actor decides nothing about
// a reply, an engine decides nothing about the log.
//
// An Engine is given a turn so far (TurnInput: the user entry, the tool
// entries of this turn, the entries before, the contexts) and returns the
// next step (Action: a reply or a tool call). It keeps no per-session
// state, so a turn goes on after a disconnect, a passivation, a crash or
// a move to another node. Optional interfaces say more: a Streamer shows
// a reply as it is written, a CallRunner declares and runs its tools per
// call (an agent endpoint), an Instant answers at once in the same append
// as the message.
//
// log.go is the vocabulary of the entries the actor writes and an engine
// reads: roles, metadata keys and tool statuses, each defined here once.
//
// Engines live in this package and under it:
//
//   - Echo (the default) and Demo (a slow search tool, a sensitive
//     payment tool, a booking tool that needs approval): echo.go, demo.go.
//   - package llm: a chat model behind an OpenAI-compatible endpoint.
//   - package httpagent: an agent endpoint in any language
//     (AGENT-PROTOCOL.md).
//   - package mcptools: MCP servers' tools, offered through llm.
//
// Nothing here imports the actor; the actor and the machine import this
// package. An engine that speaks HTTP lives in a package of its own, so
// that the session machine's dependencies stay free of network code.
//
// The exported surface: Engine, Streamer, CallRunner, Instant (the
// contract); TurnInput, HistoryLen, Action, Call, CallInput, Tool (what
// passes through it); Echo, Demo, DemoConfig, NewDemo (the engines);
// Role*, Meta*, Tool* statuses, Clip (the log's vocabulary).
package engine
