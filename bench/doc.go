// Package bench is the load harness behind `tether bench`: simulated
// users that chat, drop their connections or go silent, stay away
// (sometimes beyond the reconnect window), resume through another node,
// and have every session verified end to end. It owns:
//
//   - Bench (bench.go): one run — local nodes or a deployment's URLs, the
//     users, node failures, the drain, the read-back and the report;
//   - Local (nodes.go): N real `tether serve` processes on 127.0.0.1, killed
//     and restarted on their data dirs, their RSS and CPU read from /proc;
//   - netSim (netsim.go): each user's network, which the harness cuts or
//     freezes under the Go client (package gateway/client);
//   - Verifier (verify.go): a pure checker fed with each session's event
//     stream (entries, acks, resumes, the log read back): gaps, duplicate
//     seqs, lost acks, unanswered messages, tools run twice, early expiry;
//   - Recorder (metrics.go): HDR latency histograms and a per-second
//     timeline; Report (report.go, html.go): summary, JSON and HTML.
//
// The *_bench_test.go files hold the Go micro-benchmarks of a node
// (`make bench-micro`). Nothing in the server imports this package.
//
// # Goroutines
//
// Run owns every goroutine it starts — per user a sending loop, a chaos
// loop and a reader of the client's messages; the kill loops; the
// progress and /proc samplers; the read-back workers — and waits for all
// of them before it returns. Close stops the local nodes.
//
// # Exported surface
//
//   - Bench, New, Config: one run (Run, Close); Config.RegisterFlags
//     binds the flags of `tether bench`.
//   - Local, NewLocal, LocalConfig, NodeStat: the local nodes (Start,
//     Signal, Pause, Running, Sample, Stats, URLs, Name, Len, DialContext,
//     Close) and what /proc says about each.
//   - Verifier, NewVerifier, VerifierConfig, VerifyCounts: the checker
//     (Feed, Counts, Violations, Expired, Total).
//   - Event, EventKind and the Ev* kinds: what the Verifier is fed;
//     Violation and the V* kinds: what it finds.
//   - Recorder, NewRecorder, Snapshot, Marker, TimePoint: the figures as
//     they are gathered; the H* and C* constants: the names of its
//     histograms and counters.
//   - Report (WriteSummary, SummaryRows), SchemaVersion, WriteHTML: the
//     report, its JSON schema's name and its HTML page; its parts Target,
//     Scenario, Counts, Rates, Dist, KillReport, MarkerReport,
//     AgentReport, ViolationReport.
//   - ErrOutOfPorts, ErrOutOfFiles, ErrNeedsCluster: limits of the machine
//     running the harness (local ports, open files) and a --local cluster
//     that did not form, each with the remedy in its text.
package bench
