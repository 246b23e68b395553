// Command tether is the one Tether binary. Its first argument names a
// command, and `tether <command> --help` lists that command's flags:
//
//   - serve runs a node: the store (a Pebble directory, --data), the
//     session registry and the HTTP and WebSocket server on --listen,
//     assembled by package gateway/node, and its part in a cluster: gossip
//     on --gossip, which other nodes --join (with --cluster-secret when it
//     is not on loopback). If the default gossip address is taken and
//     there is nothing to join, the node runs alone. --agent picks the
//     engine: echo (the default), demo, openai (a chat model behind an
//     OpenAI-compatible endpoint, with the tools of --mcp servers) or http
//     (an agent endpoint, --agent-url, gateway/AGENT-PROTOCOL.md). Tokens
//     are checked with --jwt-secret; --dev-tokens instead keeps a random
//     secret in the data directory and serves POST /dev/token, on a
//     loopback --listen only unless --dev-tokens-anywhere. Most flags can
//     be given as environment variables instead (TETHER_ and the flag's
//     name in upper case, - as _); a flag on the command line wins.
//     SIGHUP re-reads --tls-cert and --tls-key; SIGTERM or SIGINT stops
//     the node gracefully, its clients told to reconnect elsewhere.
//   - chat is the terminal chat of package gateway/client: it resumes by
//     itself across dropped connections and failed nodes, with a token
//     (--token) or one asked of a node's POST /dev/token (--user), and on
//     leaving prints the command that resumes the session (--session).
//   - token prints an HS256 token for --user, signed with --secret (or
//     TETHER_JWT_SECRET), for clients and scripts.
//   - bench runs the load harness of package bench against running nodes
//     (--url) or local ones it starts from this binary (--local N).
//   - version prints the module version, VCS revision and Go version the
//     binary was built from.
//
// A failed command exits with code 2, except bench, which exits with 1
// when the run found a violation of the protocol's promises.
//
// Its tests run the commands in process (through Main) and as processes:
// nodes and clusters that are killed, restarted and partitioned, the
// deploy manifests (deploy/) and the example agent endpoints (examples/).
//
// The exported surface:
//
//   - Main: the program's streams, so that a test runs a command in
//     process (Run).
package main
