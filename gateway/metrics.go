package gateway

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/wal"
)

// Metrics are a node's Prometheus metrics, on a registry of their own (no
// global state, so tests can run many servers in one process).
type Metrics struct {
	reg    *prometheus.Registry
	conns  prometheus.Gauge
	opened prometheus.Counter
	closes *prometheus.CounterVec
	slow   prometheus.Counter
	batch  prometheus.Histogram
	resume prometheus.Histogram
	errors *prometheus.CounterVec
	// parked counts the connections parked in the server's poller.
	parked atomic.Pointer[func() int]
	// tasks counts what connections handed to the server's worker
	// goroutines (frames to read, batches to write).
	tasks atomic.Pointer[func() uint64]
	// returns counts the times freed memory was returned to the OS after
	// a wave of hibernations (the serve command's --memory-return).
	returns prometheus.Counter
}

// NewMetrics makes the gateway's own metrics plus Go and process ones.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tether_connections", Help: "Open client WebSocket connections.",
		}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_connections_opened_total", Help: "Client WebSocket connections upgraded.",
		}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_connections_closed_total", Help: "Client connections ended, by the close code the server sent (1006: none).",
		}, []string{"code"}),
		slow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_slow_clients_total", Help: "Clients closed with 1013 for falling behind their byte budget.",
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tether_wal_fsync_batch_requests", Help: "Write requests carried by one fsync (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		resume: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tether_resume_seconds", Help: "From a resuming hello to its history_batch being queued.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_errors_total", Help: "Error frames sent to clients, by code.",
		}, []string{"code"}),
		returns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_memory_returns_total", Help: "Collections run to return the memory a wave of hibernations freed to the OS.",
		}),
	}
	parked := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tether_connections_parked", Help: "Idle client connections waiting with no goroutine of their own.",
	}, func() float64 {
		if f := m.parked.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	tasks := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tether_connection_tasks_total", Help: "Reads and writes of client connections run on the gateway's worker goroutines (a heartbeat to an idle connection runs none).",
	}, func() float64 {
		if f := m.tasks.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	m.reg.MustRegister(m.conns, m.opened, m.closes, m.slow, m.batch, m.resume, m.errors, parked, tasks, m.returns,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// CountMemoryReturn counts one return of freed memory to the OS.
func (m *Metrics) CountMemoryReturn() { m.returns.Inc() }

// ObserveCommit is wal.Config.OnCommit's hook.
func (m *Metrics) ObserveCommit(requests, _ int) { m.batch.Observe(float64(requests)) }

// Watch exposes the counters of the log and of the session registry.
func (m *Metrics) Watch(log func() wal.Stats, sessions func() actor.Stats) {
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	m.reg.MustRegister(
		counter("tether_wal_appends_total", "Entries appended durably.", func() float64 { return float64(log().Entries) }),
		counter("tether_wal_fsyncs_total", "Fsynced commits of the log.", func() float64 { return float64(log().Syncs) }),
		counter("tether_wal_sessions_deleted_total", "Sessions deleted by retention.", func() float64 { return float64(log().Deleted) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_sessions_active", Help: "Session actors in memory."},
			func() float64 { return float64(sessions().Active) }),
		counter("tether_sessions_activated_total", "Sessions created or loaded from the log.", func() float64 { return float64(sessions().Activations) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_sessions_asleep", Help: "Hibernated sessions: clients attached, nothing else in memory."},
			func() float64 { return float64(sessions().Asleep) }),
		counter("tether_sessions_hibernated_total", "Sessions that left memory with their clients attached.", func() float64 { return float64(sessions().Hibernations) }),
		counter("tether_sessions_passivated_total", "Session actors stopped (idle, expired, completed).", func() float64 { return float64(sessions().Passivations) }),
		counter("tether_tool_runs_total", "Tool runs started.", func() float64 { return float64(sessions().ToolRuns) }),
		counter("tether_corrupt_records_total", "Stored records that could not be read (entries, headers, states, contexts).",
			func() float64 { return float64(log().Corrupt + sessions().Corrupt) }),
	)
}

// WatchCluster exposes the counters of the node's part in a cluster.
func (m *Metrics) WatchCluster(stats func() cluster.Stats) {
	counter := func(name, help string, f func(cluster.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(stats())) })
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_cluster_members", Help: "Members of the committed configuration."},
			func() float64 { return float64(stats().Members) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_cluster_configuration", Help: "Number of the newest committed configuration applied here."},
			func() float64 { return float64(stats().Raft.Configuration) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_cluster_raft_voters", Help: "Voters of the Raft group."},
			func() float64 { return float64(stats().Raft.Voters) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_cluster_raft_voter", Help: "1 while this node is a voter of the Raft group."},
			func() float64 {
				if stats().Raft.Voter {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_cluster_raft_leader", Help: "1 while this node leads the Raft group."},
			func() float64 {
				if stats().Raft.IsLeader {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_cluster_raft_has_leader", Help: "1 while this node knows a Raft leader."},
			func() float64 {
				if stats().Raft.Leader != "" {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_cluster_raft_commit_seconds", Help: "Commit latency of the last configuration this node committed as leader."},
			func() float64 { return stats().Raft.CommitLatency.Seconds() }),
		counter("tether_cluster_pulls_total", "Activations that fetched a session's log from another node.", func(s cluster.Stats) uint64 { return s.Pulls }),
		counter("tether_cluster_forwarded_total", "Client sessions opened on another owner.", func(s cluster.Stats) uint64 { return s.Forwarded }),
		counter("tether_cluster_served_total", "Sessions served here for clients of other nodes.", func(s cluster.Stats) uint64 { return s.Served }),
		counter("tether_cluster_replicated_total", "Batches stored on every replica.", func(s cluster.Stats) uint64 { return s.Replicated }),
		counter("tether_cluster_fenced_total", "Appends refused because another node owns the session.", func(s cluster.Stats) uint64 { return s.Fenced }),
		counter("tether_cluster_moved_total", "Session actors stopped because their owner changed.", func(s cluster.Stats) uint64 { return s.Moved }),
		counter("tether_cluster_catchups_total", "Replicas brought up to date.", func(s cluster.Stats) uint64 { return s.CatchUps }),
		counter("tether_cluster_unavailable_total", "Opens answered unavailable: the owner could not be reached.", func(s cluster.Stats) uint64 { return s.Unavailable }),
		counter("tether_cluster_rereplicated_total", "Sessions brought onto a new write set in the background after a configuration change.", func(s cluster.Stats) uint64 { return s.Rereplicated }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_cluster_rereplicating", Help: "Sessions the current re-replication pass has left."},
			func() float64 { return float64(stats().Rereplicating) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_cluster_rereplicated_configuration", Help: "The configuration whose re-replication pass finished: every copy here is on its write set."},
			func() float64 { return float64(stats().RereplicatedConfiguration) }),
		counter("tether_cluster_link_reports_total", "Times this node told the Raft leader that its link to a replica failed (the leader then leaves one of the two out of the configuration for a while).", func(s cluster.Stats) uint64 { return s.Reports }),
		counter("tether_cluster_frames_total", "History batches this node encoded for clients attached through other nodes.", func(s cluster.Stats) uint64 { return s.Frames }),
	)
}
