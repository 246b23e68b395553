package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// SchemaVersion names the JSON report's schema (bench/README.md).
const SchemaVersion = "tether-bench/1"

// Report is every figure of a run; its JSON form is documented in
// bench/README.md.
type Report struct {
	Schema      string    `json:"schema"`
	Passed      bool      `json:"passed"`
	Interrupted bool      `json:"interrupted"`
	StartedAt   time.Time `json:"started_at"`
	LoadS       float64   `json:"load_s"`
	ElapsedS    float64   `json:"elapsed_s"`
	Seed        uint64    `json:"seed"`
	Target      Target    `json:"target"`
	Scenario    Scenario  `json:"scenario"`
	Counts      Counts    `json:"counts"`
	Rates       Rates     `json:"rates"`
	// Latency holds the latency distributions, in milliseconds.
	Latency           map[string]Dist  `json:"latency_ms"`
	ReplayedPerResume Dist             `json:"replayed_per_resume"`
	CloseCodes        map[string]int64 `json:"close_codes"`
	Errors            map[string]int64 `json:"errors"`
	Kills             []KillReport     `json:"kills"`
	Nodes             []NodeStat       `json:"nodes"`
	// NodeRSSIdleBytes is the nodes' summed RSS before the load,
	// NodeRSSPeakBytes its peak during the run; RSSPerSessionBytes is
	// their difference divided by the users.
	NodeRSSIdleBytes   int64           `json:"node_rss_idle_bytes"`
	NodeRSSPeakBytes   int64           `json:"node_rss_peak_bytes"`
	RSSPerSessionBytes int64           `json:"rss_per_session_bytes"`
	NofileLimit        uint64          `json:"nofile_limit"`
	Violations         ViolationReport `json:"violations"`
	// Agent: with --agent http, the endpoint's figures; absent otherwise.
	Agent    *AgentReport   `json:"agent,omitempty"`
	Timeline []TimePoint    `json:"timeline"`
	Markers  []MarkerReport `json:"markers"`
}

// Target is what was benchmarked.
type Target struct {
	Mode       string   `json:"mode"` // local or url
	URLs       []string `json:"urls"`
	Nodes      int      `json:"nodes"`
	WindowS    float64  `json:"window_s"`
	Agent      string   `json:"agent,omitempty"`
	ToolDelayS float64  `json:"tool_delay_s,omitempty"`
}

// Scenario is the load that was run.
type Scenario struct {
	Sessions    int     `json:"sessions"`
	AgentUsers  int     `json:"agent_users"`
	RampS       float64 `json:"ramp_s"`
	DurationS   float64 `json:"duration_s"`
	Rate        float64 `json:"rate"`
	AgentMix    float64 `json:"agent_mix"`
	DropEveryS  float64 `json:"drop_every_s"`
	SilentFrac  float64 `json:"silent_frac"`
	AwayMaxS    float64 `json:"away_max_s"`
	ExpireFrac  float64 `json:"expire_frac"`
	KillEveryS  float64 `json:"kill_every_s"`
	TermEveryS  float64 `json:"term_every_s"`
	DownS       float64 `json:"down_s"`
	PauseEveryS float64 `json:"pause_every_s,omitempty"`
	PauseForS   float64 `json:"pause_for_s,omitempty"`
	// PartitionEveryS and PartitionForS: --partition-every, --partition-for.
	PartitionEveryS float64 `json:"partition_every_s,omitempty"`
	PartitionForS   float64 `json:"partition_for_s,omitempty"`
}

// Counts are the run's totals.
type Counts struct {
	Users            int    `json:"users"`
	Sessions         int64  `json:"sessions"`
	SessionsVerified int    `json:"sessions_verified"`
	SessionsExpired  int    `json:"sessions_expired"`
	PlannedExpiries  int64  `json:"planned_expiries"`
	Sends            int64  `json:"sends"`
	AckedSends       int    `json:"acked_sends"`
	AcksVerified     int    `json:"acks_verified"`
	UncheckedAcks    int    `json:"unchecked_acks"`
	Replies          int64  `json:"replies"`
	ReplyTimeouts    int64  `json:"reply_timeouts"`
	UserEntries      int    `json:"user_entries"`
	ToolCalls        int    `json:"tool_calls"`
	Resumes          int64  `json:"resumes"`
	Disconnects      int64  `json:"disconnects"`
	Drops            int64  `json:"drops"`
	Silences         int64  `json:"silences"`
	NodeKills        int    `json:"node_kills"`
	NodeTerms        int    `json:"node_terms"`
	NodePauses       int    `json:"node_pauses"`
	NodePartitions   int    `json:"node_partitions"` // cuts, both ways or one way (Kills: signal CUT, CUT1W)
	EntriesSeen      int    `json:"entries_seen"`
	EntriesReread    int    `json:"entries_reread"`
	EntriesCompared  int    `json:"entries_compared"`
	ClientDuplicates uint64 `json:"client_duplicates"`
	ClientGaps       uint64 `json:"client_gaps"`
	ClientResends    uint64 `json:"client_resends"`
	Errors           int64  `json:"errors"`
	Violations       int    `json:"violations"`
}

// Rates are per second of the load phase.
type Rates struct {
	SendsPerS       float64 `json:"sends_per_s"`
	AcksPerS        float64 `json:"acks_per_s"`
	RepliesPerS     float64 `json:"replies_per_s"`
	ResumesPerS     float64 `json:"resumes_per_s"`
	ReconnectsPerS  float64 `json:"reconnects_per_s"`
	DisconnectsPerS float64 `json:"disconnects_per_s"`
}

// Dist is a distribution: latencies in milliseconds, or counts.
type Dist struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
}

// AgentReport is what --agent http measured: turns, and the latency
// Tether adds over the endpoint's own. Direct is the bench's own step
// requests straight to the endpoint (request → final NDJSON line), as
// many direct users as bench users at the same rate, during the load;
// ThroughTether is send → the agent's reply on one connection (the
// latency_ms reply). Each turn of the rule-based example is one step.
type AgentReport struct {
	URL     string `json:"url"`
	Started bool   `json:"started"` // the harness started it (else --agent-url)
	// Turns are the agent replies delivered during the load phase.
	Turns         int64   `json:"turns"`
	TurnsPerS     float64 `json:"turns_per_s"`
	Direct        Dist    `json:"direct_ms"`
	ThroughTether Dist    `json:"through_tether_ms"`
	AddedP50Ms    float64 `json:"added_p50_ms"` // through Tether minus direct, at p50
	AddedP99Ms    float64 `json:"added_p99_ms"` // and at p99
	DirectErrors  int64   `json:"direct_errors"`
}

// KillReport is one node failure.
type KillReport struct {
	AtS           float64  `json:"at_s"`
	Node          string   `json:"node"`
	Signal        string   `json:"signal"`
	RestartedAtS  *float64 `json:"restarted_at_s"`
	FirstResumeMs *float64 `json:"first_resume_ms"`
}

// MarkerReport is a node event on the timeline.
type MarkerReport struct {
	AtS   float64 `json:"at_s"`
	Kind  string  `json:"kind"`
	Label string  `json:"label"`
}

// ViolationReport lists what the verifier found.
type ViolationReport struct {
	Total  int            `json:"total"`
	ByKind map[string]int `json:"by_kind"`
	List   []Violation    `json:"list"` // the first 1000
}

func dist(h *hdrhistogram.Histogram, scale float64) Dist {
	if h == nil || h.TotalCount() == 0 {
		return Dist{}
	}
	q := func(p float64) float64 { return float64(h.ValueAtQuantile(p)) / scale }
	return Dist{Count: h.TotalCount(), Mean: h.Mean() / scale, P50: q(50), P90: q(90), P99: q(99), P999: q(99.9),
		Max: float64(h.Max()) / scale}
}

// report gathers every figure.
func (b *Bench) report(elapsed time.Duration, interrupted bool) *Report {
	snap := b.rec.Snapshot()
	vc := b.ver.Counts()
	list, byKind, total := b.ver.Violations()
	load := min(elapsed, b.cfg.Duration).Seconds()
	if interrupted && len(snap.Timeline) > 0 {
		load = min(load, float64(len(snap.Timeline)))
	}
	per := func(n int64) float64 {
		if load <= 0 {
			return 0
		}
		return float64(n) / load
	}
	c := snap.Counts
	r := &Report{
		Schema: SchemaVersion, Passed: total == 0, Interrupted: interrupted, StartedAt: b.start.UTC(),
		LoadS: load, ElapsedS: elapsed.Seconds(), Seed: b.seed, NofileLimit: b.nofile[0],
		Target: Target{Mode: "url", URLs: b.urls, Nodes: len(b.urls), WindowS: b.window().Seconds()},
		Scenario: Scenario{
			Sessions: b.cfg.Sessions, RampS: b.cfg.Ramp.Seconds(), DurationS: b.cfg.Duration.Seconds(), Rate: b.cfg.Rate,
			AgentMix: b.cfg.AgentMix, DropEveryS: max(b.cfg.DropEvery, 0).Seconds(), SilentFrac: b.cfg.SilentFrac,
			AwayMaxS: b.cfg.AwayMax.Seconds(), ExpireFrac: b.cfg.ExpireFrac, KillEveryS: b.cfg.KillEvery.Seconds(),
			TermEveryS: b.cfg.TermEvery.Seconds(), DownS: b.cfg.Down.Seconds(),
			PauseEveryS: b.cfg.PauseEvery.Seconds(), PauseForS: b.cfg.PauseFor.Seconds(),
			PartitionEveryS: b.cfg.PartitionEvery.Seconds(), PartitionForS: b.cfg.PartitionFor.Seconds(),
		},
		Counts: Counts{
			Users: len(b.users), Sessions: c[CNewSessions], SessionsVerified: vc.Verified, SessionsExpired: vc.Expired,
			PlannedExpiries: c[CPlannedLong], Sends: c[CSends], AckedSends: vc.AckedSends, AcksVerified: vc.AcksVerified,
			UncheckedAcks: vc.UncheckedAcks, Replies: c[CReplies], ReplyTimeouts: c[CReplyTimeout],
			UserEntries: vc.UserEntries, ToolCalls: vc.ToolCalls, Resumes: c[CResumes], Disconnects: c[CDisconnects],
			Drops: c[CDrops], Silences: c[CSilences], EntriesSeen: vc.EntriesSeen, EntriesReread: vc.EntriesReread,
			EntriesCompared: vc.EntriesCompared,
			Errors:          c[CErrors], Violations: total,
		},
		Rates: Rates{
			SendsPerS: per(c[CSends]), AcksPerS: per(c[CAcks]), RepliesPerS: per(c[CReplies]),
			ResumesPerS: per(c[CResumes]), ReconnectsPerS: per(c[CResumes]), DisconnectsPerS: per(c[CDisconnects]),
		},
		Latency:           make(map[string]Dist),
		ReplayedPerResume: dist(snap.Hists[HReplayedPerResum], 1),
		CloseCodes:        snap.Closes, Errors: snap.Errors, Timeline: snap.Timeline,
		Violations: ViolationReport{Total: total, ByKind: byKind, List: list},
		// Empty lists, not null, for scripts.
		Kills: []KillReport{}, Nodes: []NodeStat{}, Markers: []MarkerReport{},
	}
	if r.Violations.List == nil {
		r.Violations.List = []Violation{}
	}
	if r.Timeline == nil {
		r.Timeline = []TimePoint{}
	}
	for _, n := range []string{HAck, HReply, HAckReconnect, HReplyReconnect, HResume, HKillToResume} {
		r.Latency[n] = dist(snap.Hists[n], 1000)
	}
	for _, u := range b.users {
		if u.agent {
			r.Scenario.AgentUsers++
		}
		u.mu.Lock()
		for _, run := range u.runs {
			st := run.c.Stats()
			r.Counts.ClientDuplicates += st.Duplicates
			r.Counts.ClientGaps += st.Gaps
			r.Counts.ClientResends += st.Resends
		}
		u.mu.Unlock()
	}
	for _, m := range snap.Markers {
		r.Markers = append(r.Markers, MarkerReport{AtS: m.At.Seconds(), Kind: m.Kind, Label: m.Label})
	}
	b.killMu.Lock()
	for _, k := range b.kills {
		kr := KillReport{AtS: k.At.Sub(b.start).Seconds(), Node: k.Node, Signal: k.Signal}
		if !k.RestartedAt.IsZero() {
			v := k.RestartedAt.Sub(b.start).Seconds()
			kr.RestartedAtS = &v
		}
		if !k.FirstResume.IsZero() {
			v := float64(k.FirstResume.Sub(k.At)) / float64(time.Millisecond)
			kr.FirstResumeMs = &v
		}
		switch k.Signal {
		case "KILL":
			r.Counts.NodeKills++
		case "STOP":
			r.Counts.NodePauses++
		case "CUT", "CUT1W":
			r.Counts.NodePartitions++
		default:
			r.Counts.NodeTerms++
		}
		r.Kills = append(r.Kills, kr)
	}
	b.killMu.Unlock()
	if b.local != nil {
		r.Target.Mode, r.Target.Agent, r.Target.ToolDelayS = "local", b.cfg.Agent, b.cfg.ToolDelay.Seconds()
		r.Nodes = b.local.Stats()
		for _, p := range snap.Timeline {
			r.NodeRSSPeakBytes = max(r.NodeRSSPeakBytes, p.NodeRSS)
		}
		for _, n := range r.Nodes { // sampled also just before each kill
			r.NodeRSSPeakBytes = max(r.NodeRSSPeakBytes, n.RSSPeak)
		}
		r.NodeRSSIdleBytes = b.idleRSS
		r.RSSPerSessionBytes = max(r.NodeRSSPeakBytes-b.idleRSS, 0) / int64(max(b.cfg.Sessions, 1))
	}
	if b.agent != nil {
		a := &AgentReport{URL: b.agent.url, Started: b.agentProc != nil, Turns: c[CTurns], TurnsPerS: per(c[CTurns]),
			Direct: dist(snap.Hists[HDirect], 1000), ThroughTether: r.Latency[HReply], DirectErrors: snap.Errors["agent_direct_failed"]}
		a.AddedP50Ms, a.AddedP99Ms = a.ThroughTether.P50-a.Direct.P50, a.ThroughTether.P99-a.Direct.P99
		r.Agent = a
		r.Latency[HDirect] = a.Direct
	}
	return r
}

// writeOutputs prints the summary and writes the JSON and HTML files.
func (b *Bench) writeOutputs(r *Report) error {
	if b.cfg.ErrIsTerminal {
		fmt.Fprint(b.cfg.Err, "\r\033[K")
	}
	r.WriteSummary(b.cfg.Out)
	var errs []error
	if p := b.cfg.JSONPath; p != "" {
		data, err := json.MarshalIndent(r, "", "  ")
		if err == nil {
			err = os.WriteFile(p, append(data, '\n'), 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bench: --json: %w", err))
		}
	}
	if p := b.cfg.HTMLPath; p != "" {
		f, err := os.Create(p)
		if err == nil {
			err = WriteHTML(f, r)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bench: --html: %w", err))
		}
	}
	return errors.Join(errs...)
}

// WriteSummary prints the summary table.
func (r *Report) WriteSummary(w io.Writer) {
	for _, row := range r.SummaryRows() {
		fmt.Fprintf(w, "%-20s %s\n", row[0], row[1])
	}
	tw := tabwriter.NewWriter(w, 8, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency (ms)\tcount\tp50\tp90\tp99\tp99.9\tmax\t")
	for _, n := range latencyOrder {
		d := r.Latency[n]
		if d.Count == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", latencyLabel[n], d.Count, d.P50, d.P90, d.P99, d.P999, d.Max)
	}
	_ = tw.Flush()
	if len(r.Violations.List) > 0 {
		fmt.Fprintln(w, "violations (first 20):")
		for _, v := range r.Violations.List[:min(20, len(r.Violations.List))] {
			fmt.Fprintln(w, "  "+v.String())
		}
	}
}

var latencyOrder = []string{HAck, HReply, HAckReconnect, HReplyReconnect, HResume, HKillToResume, HDirect}

var latencyLabel = map[string]string{
	HAck: "send→ack", HReply: "send→reply", HAckReconnect: "send→ack, reconnect between",
	HReplyReconnect: "send→reply, reconnect between", HResume: "resume (hello→batch)", HKillToResume: "kill→first resume",
	HDirect: "agent direct (no Tether)",
}

// SummaryRows are the summary's label/value rows (the latency table
// aside).
func (r *Report) SummaryRows() [][2]string {
	verdict := fmt.Sprintf("PASSED: 0 violations in %d sessions", r.Counts.Sessions)
	if !r.Passed {
		verdict = fmt.Sprintf("FAILED: %d violations (%s)", r.Violations.Total, kv(toInt64(r.Violations.ByKind)))
	}
	if r.Interrupted {
		verdict += " — interrupted"
	}
	target := fmt.Sprintf("%s, %d node(s), window %gs", r.Target.Mode, r.Target.Nodes, r.Target.WindowS)
	if r.Target.Agent != "" {
		target += fmt.Sprintf(", %s engine", r.Target.Agent)
		if r.Target.Agent == "demo" {
			target += fmt.Sprintf(" (tool %gs)", r.Target.ToolDelayS)
		}
	}
	c := r.Counts
	rows := [][2]string{
		{"tether bench", verdict},
		{"target", target},
		{"load", fmt.Sprintf("%d users over %.0fs (ramp %gs), %g msg/s each, %d agent users; seed %d",
			r.Scenario.Sessions, r.LoadS, r.Scenario.RampS, r.Scenario.Rate, r.Scenario.AgentUsers, r.Seed)},
		{"sessions", fmt.Sprintf("%d (%d read back and verified, %d expired; %d stays beyond the window planned)",
			c.Sessions, c.SessionsVerified, c.SessionsExpired, c.PlannedExpiries)},
		{"messages", fmt.Sprintf("%d sent, %d acked (%d found in the log at their seq), %d replies, %d tool calls",
			c.Sends, c.AckedSends, c.AcksVerified, c.Replies, c.ToolCalls)},
		{"rates", fmt.Sprintf("%.1f sends/s, %.1f replies/s, %.2f resumes/s, %.2f disconnects/s",
			r.Rates.SendsPerS, r.Rates.RepliesPerS, r.Rates.ResumesPerS, r.Rates.DisconnectsPerS)},
		{"disruptions", fmt.Sprintf("%d drops, %d silences, %d node kills, %d node terms, %d node pauses, %d partitions", c.Drops, c.Silences, c.NodeKills, c.NodeTerms, c.NodePauses, c.NodePartitions)},
		{"entries", fmt.Sprintf("%d seen live, %d read back (%d compared); client repaired %d gaps, dropped %d duplicates, resent %d",
			c.EntriesSeen, c.EntriesReread, c.EntriesCompared, c.ClientGaps, c.ClientDuplicates, c.ClientResends)},
	}
	if a := r.Agent; a != nil {
		rows = append(rows, [2]string{"agent endpoint", fmt.Sprintf("%.1f turns/s (%d turns); step p50 %.1f ms, p99 %.1f ms direct, "+
			"%.1f / %.1f ms through Tether: Tether adds %.1f ms at p50, %.1f ms at p99",
			a.TurnsPerS, a.Turns, a.Direct.P50, a.Direct.P99, a.ThroughTether.P50, a.ThroughTether.P99, a.AddedP50Ms, a.AddedP99Ms)})
	}
	if d := r.ReplayedPerResume; d.Count > 0 {
		rows = append(rows, [2]string{"missed per resume", fmt.Sprintf("mean %.1f, p50 %.0f, p99 %.0f, max %.0f", d.Mean, d.P50, d.P99, d.Max)})
	}
	rows = append(rows, [2]string{"close causes", kv(r.CloseCodes)}, [2]string{"errors", kv(r.Errors)})
	for _, n := range r.Nodes {
		rows = append(rows, [2]string{n.Name, fmt.Sprintf("peak RSS %s, last %s, CPU %.1fs, started %d×",
			bytesStr(n.RSSPeak), bytesStr(n.RSSLast), n.CPUSeconds, n.Starts)})
	}
	if r.RSSPerSessionBytes > 0 {
		rows = append(rows, [2]string{"RSS per session", fmt.Sprintf("%s ((peak %s − idle %s) / users)",
			bytesStr(r.RSSPerSessionBytes), bytesStr(r.NodeRSSPeakBytes), bytesStr(r.NodeRSSIdleBytes))})
	}
	return rows
}

func toInt64(m map[string]int) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = int64(v)
	}
	return out
}

// kv prints a count map, largest first.
func kv(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func bytesStr(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
