// Package llm is the `--agent openai` engine: a chat model behind any
// OpenAI-compatible chat-completions endpoint, driven through the
// official openai-go client. It streams replies (an engine.Streamer),
// offers the model built-in demo tools and, through a ToolSource, the
// tools of MCP servers (package actor/engine/mcptools), and keeps no
// session state: each request is built from the engine.TurnInput the
// actor gives it, so a turn goes on after a crash or a move.
//
// The exported surface:
//
//   - Config, New, Engine: the engine (Close drops idle connections).
//   - Tool: a tool offered to the model (an engine.Tool with the
//     description and JSON schema the model is shown).
//   - ToolSource: tools that may change while the node runs (MCP).
//   - BuiltinToolsConfig, BuiltinTools: the placeholder demo tools.
//   - DefaultOpenAISystem, and the errors a failed request is reported as.
package llm
