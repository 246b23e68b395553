// Package nodetest starts in-process Tether nodes and issues their
// tokens, for tests, as net/http/httptest starts servers for net/http: a
// real node (Pebble in a temporary directory, the registry, the
// HTTP/WebSocket server on 127.0.0.1), assembled by package node as
// `tether serve` assembles one, and closed when the test ends. For the
// tests that need the program itself (flags, signals, kill -9, a browser
// or a benchmark outside the process), it also builds cmd/tether once
// and starts real `tether serve` processes on real sockets.
//
// It is test support only: production code never imports it. Apart from
// a process's log lines (which say when it listens, and nothing else
// does), it does not wait for conditions; tests wait with actortest.Eventually and
// actortest.Recv (package actor/actortest). A package's internal tests
// can use it only if the package is not one nodetest imports (gateway,
// gateway/node, actor, wal, cluster and what they import): such a test
// would make an import cycle.
//
// The exported surface:
//
//   - Start, Options, Node: a node for one test (URL, HTTP, Dir, Clock,
//     and the assembled node.Node: Log, Registry, Server, Metrics, Close).
//   - Secret: the HS256 secret every node accepts unless told otherwise.
//   - Token, Issue, ExpiredToken: tokens signed with Secret.
//   - Binary, RemoveBinary: cmd/tether built once per test binary, and
//     the call for TestMain that removes it.
//   - StartServe, ServeOptions: a real `tether serve` process (flags,
//     data directory, environment, how it is started and waited for).
//   - StartCmd: any command run as a Proc (a test's agent process).
//   - Proc: a running process, its log kept (Stderr, WaitLog,
//     WaitListening, Addr), and its end (Running, Exited, Err, Stop).
//   - Environ: the environment without TETHER_* variables.
package nodetest
