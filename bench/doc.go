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
package bench
