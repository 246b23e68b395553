package bench

import (
	"maps"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency histograms, in microseconds: 1µs to 10 minutes, 3 significant
// figures (per-second ones: 2).
const (
	histMin = 1
	histMax = int64(10 * time.Minute / time.Microsecond)
)

// Histogram names.
const (
	HAck              = "ack"                    // send → ack, on one connection
	HReply            = "reply"                  // send → reply, on one connection
	HAckReconnect     = "ack_across_reconnect"   // send → ack when a reconnect came between
	HReplyReconnect   = "reply_across_reconnect" // send → reply when a reconnect came between
	HResume           = "resume"                 // hello → history_batch of a resume
	HKillToResume     = "kill_to_first_resume"   // node killed → first session resumed after it
	HReplayedPerResum = "replayed_per_resume"    // entries missed while away (a count, not µs)
	HDirect           = "agent_direct"           // --agent http: step request → final line, straight to the endpoint
)

var histNames = []string{HAck, HReply, HAckReconnect, HReplyReconnect, HResume, HKillToResume, HReplayedPerResum, HDirect}

// Counter names (see the JSON schema in README.md).
const (
	CSends        = "sends"
	CAcks         = "acks"
	CReplies      = "replies"
	CResumes      = "resumes"
	CDisconnects  = "disconnects"
	CDrops        = "drops"
	CSilences     = "silences"
	CPlannedLong  = "planned_expiries"
	CExpired      = "expired"
	CNewSessions  = "new_sessions"
	CErrors       = "errors"
	CReplyTimeout = "reply_timeouts"
	CTurns        = "turns" // agent replies delivered during the load phase
)

// bucket is one second of the run.
type bucket struct {
	counts map[string]int64
	ack    *hdrhistogram.Histogram
	reply  *hdrhistogram.Histogram
	rss    int64   // total RSS of the local nodes, bytes
	cpu    float64 // CPU of the local nodes, percent of one core
}

// Marker is a moment of the run worth drawing: a node killed or
// restarted.
type Marker struct {
	At    time.Duration
	Label string
	Kind  string // kill, term, restart
}

// Recorder collects every figure of a run. Safe for concurrent use.
type Recorder struct {
	start time.Time

	mu      sync.Mutex
	hists   map[string]*hdrhistogram.Histogram
	counts  map[string]int64
	closes  map[string]int64
	errors  map[string]int64
	buckets []*bucket
	markers []Marker
}

// NewRecorder starts recording; times are counted from start.
func NewRecorder(start time.Time) *Recorder {
	r := &Recorder{
		start: start, hists: make(map[string]*hdrhistogram.Histogram),
		counts: make(map[string]int64), closes: make(map[string]int64), errors: make(map[string]int64),
	}
	for _, n := range histNames {
		r.hists[n] = hdrhistogram.New(histMin, histMax, 3)
	}
	return r
}

// bucketAt returns the bucket of time t; r.mu is held.
func (r *Recorder) bucketAt(t time.Time) *bucket {
	i := max(int(t.Sub(r.start)/time.Second), 0)
	for len(r.buckets) <= i {
		r.buckets = append(r.buckets, &bucket{
			counts: make(map[string]int64),
			ack:    hdrhistogram.New(histMin, histMax, 2),
			reply:  hdrhistogram.New(histMin, histMax, 2),
		})
	}
	return r.buckets[i]
}

func micros(d time.Duration) int64 { return min(max(int64(d/time.Microsecond), histMin), histMax) }

// Latency records d in histogram name, at time t.
func (r *Recorder) Latency(name string, t time.Time, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := micros(d)
	_ = r.hists[name].RecordValue(v)
	switch name {
	case HAck:
		_ = r.bucketAt(t).ack.RecordValue(v)
	case HReply:
		_ = r.bucketAt(t).reply.RecordValue(v)
	}
}

// Value records a plain number (a count) in histogram name.
func (r *Recorder) Value(name string, v int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.hists[name].RecordValue(min(max(v, 0), histMax))
}

// Count adds n to counter name at time t.
func (r *Recorder) Count(name string, t time.Time, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[name] += n
	r.bucketAt(t).counts[name] += n
}

// Close counts a lost connection by its kind (a close code, or what
// ended it).
func (r *Recorder) Close(kind string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closes[kind]++
	r.counts[CDisconnects]++
	r.bucketAt(t).counts[CDisconnects]++
}

// Error counts an error by kind.
func (r *Recorder) Error(kind string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors[kind]++
	r.counts[CErrors]++
	r.bucketAt(t).counts[CErrors]++
}

// Mark notes a node event.
func (r *Recorder) Mark(m Marker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.markers = append(r.markers, m)
}

// Nodes notes the local nodes' total RSS and CPU at time t.
func (r *Recorder) Nodes(t time.Time, rss int64, cpuPct float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bucketAt(t)
	b.rss, b.cpu = max(b.rss, rss), max(b.cpu, cpuPct)
}

// Get returns counter name.
func (r *Recorder) Get(name string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[name]
}

// Snapshot is a copy of the figures for progress lines and the report.
type Snapshot struct {
	Counts   map[string]int64
	Closes   map[string]int64
	Errors   map[string]int64
	Hists    map[string]*hdrhistogram.Histogram
	Timeline []TimePoint
	Markers  []Marker
}

// TimePoint is one second of the run in the report.
type TimePoint struct {
	T          int              `json:"t"`
	Counts     map[string]int64 `json:"counts"`
	AckP50Ms   float64          `json:"ack_p50_ms"`
	AckP99Ms   float64          `json:"ack_p99_ms"`
	ReplyP99Ms float64          `json:"reply_p99_ms"`
	NodeRSS    int64            `json:"node_rss_bytes,omitempty"`
	NodeCPUPct float64          `json:"node_cpu_pct,omitempty"`
}

// Snapshot copies the figures so far.
func (r *Recorder) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Snapshot{
		Counts: maps.Clone(r.counts), Closes: maps.Clone(r.closes), Errors: maps.Clone(r.errors),
		Hists: make(map[string]*hdrhistogram.Histogram, len(r.hists)), Markers: append([]Marker(nil), r.markers...),
	}
	for n, h := range r.hists {
		s.Hists[n] = h.Clone()
	}
	for i, b := range r.buckets {
		s.Timeline = append(s.Timeline, TimePoint{
			T: i, Counts: maps.Clone(b.counts),
			AckP50Ms: ms(b.ack, 50), AckP99Ms: ms(b.ack, 99), ReplyP99Ms: ms(b.reply, 99),
			NodeRSS: b.rss, NodeCPUPct: b.cpu,
		})
	}
	return s
}

// Last returns the counters of the last complete second before t, and
// that second's ack p99.
func (r *Recorder) Last(t time.Time) (map[string]int64, float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := int(t.Sub(r.start)/time.Second) - 1
	if i < 0 || i >= len(r.buckets) {
		return map[string]int64{}, 0
	}
	b := r.buckets[i]
	return maps.Clone(b.counts), ms(b.ack, 99)
}

func ms(h *hdrhistogram.Histogram, q float64) float64 {
	if h.TotalCount() == 0 {
		return 0
	}
	return float64(h.ValueAtQuantile(q)) / 1000
}
