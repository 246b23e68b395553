package bench

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tether-dev/tether/gateway/wire"
)

// Violation kinds. Each is a broken promise of PROTOCOL.md, seen from the
// client's side or in the session's log read back after the run.
const (
	VGap             = "gap"                // an entry did not follow the one before it
	VDuplicateSeq    = "duplicate_seq"      // a seq delivered twice, or going backwards
	VLostAck         = "lost_ack"           // an acked send is not in the log at its ack's seq
	VAckChanged      = "ack_changed"        // one send id acked with two seqs, or one seq for two ids
	VDuplicateSend   = "duplicate_send"     // one send id stored at two seqs
	VUnanswered      = "unanswered"         // a user entry with no agent/system entry replying to it
	VToolRerun       = "tool_rerun"         // a tool call started twice, or finished twice
	VToolNoStart     = "tool_without_start" // a tool outcome for a call that never started
	VLogTruncated    = "log_truncated"      // the server's last_seq is below a seq the client saw
	VEntryChanged    = "entry_changed"      // the log read back differs from what the client saw
	VLostEntries     = "lost_entries"       // the log read back lacks entries the client saw
	VExpiredEarly    = "expired_early"      // resume refused as expired before the window passed
	VSessionLost     = "session_lost"       // resume refused as not_found, completed, …
	VClientFailed    = "client_failed"      // the client ended for a reason other than expiry
	VRereadFailed    = "reread_failed"      // the session could not be read back after the run
	maxKeptViolation = 1000
)

// Violation is one broken promise, with the session and seqs it is about.
type Violation struct {
	Kind    string   `json:"kind"`
	Session string   `json:"session"`
	Seqs    []uint64 `json:"seqs,omitempty"`
	Detail  string   `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("VIOLATION %s session=%s seqs=%v: %s", v.Kind, v.Session, v.Seqs, v.Detail)
}

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EvEntry: the client delivered Msg (live or replayed).
	EvEntry EventKind = iota + 1
	// EvAck: the send SendID was acked as Seq.
	EvAck
	// EvResume: a hello that resumed (or tried to resume) the session was
	// answered with Frame. Away is how long the session had been without
	// a connection from the client's point of view.
	EvResume
	// EvClientEnded: the client ended with Err (not at Close); an
	// expiry is reported by EvResume instead.
	EvClientEnded
	// EvFinal: the run is over. Log is the whole session read back from a
	// node from seq 1 (nil for an expired session, or when Err says why
	// it could not be read).
	EvFinal
)

// Event is one thing a client saw. The Verifier is fed a stream of them
// per session; it does not care which goroutine saw what, only that each
// session's EvEntry events come in delivery order.
type Event struct {
	Kind   EventKind
	Msg    wire.Message      // EvEntry
	SendID string            // EvAck
	Seq    uint64            // EvAck
	Frame  wire.SessionFrame // EvResume
	Away   time.Duration     // EvResume
	Log    []wire.Message    // EvFinal
	Err    error             // EvClientEnded, EvFinal
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Window is the reconnect window; a resume refused as expired after
	// less than Window-Slack away is a violation. 0: taken from the
	// session frames' window_s.
	Window time.Duration
	// Slack is the clock allowance for Window. Default 250ms.
	Slack time.Duration
	// OnViolation, when set, sees each violation as it is found (from the
	// goroutine that fed the event).
	OnViolation func(Violation)
}

// Verifier checks every session's event stream against the protocol's
// promises. It holds only compact summaries of the entries seen. Safe
// for concurrent use.
type Verifier struct {
	cfg VerifierConfig

	mu       sync.Mutex
	sessions map[string]*vsession
	kept     []Violation
	byKind   map[string]int
	total    int
	counts   VerifyCounts
}

// VerifyCounts are the Verifier's tallies.
type VerifyCounts struct {
	Sessions        int `json:"sessions"`          // sessions seen
	Verified        int `json:"verified"`          // read back and checked in full
	Expired         int `json:"expired"`           // reported expired by the server (not errors)
	EntriesSeen     int `json:"entries_seen"`      // entries delivered to the clients
	EntriesReread   int `json:"entries_reread"`    // entries read back after the run
	EntriesCompared int `json:"entries_compared"`  // entries seen live and compared with the log read back
	AckedSends      int `json:"acked_sends"`       // distinct acked send ids
	AcksVerified    int `json:"acks_verified"`     // acked sends found in a log at their seq
	UserEntries     int `json:"user_entries"`      // user entries checked for an answer
	ToolCalls       int `json:"tool_calls"`        // distinct tool calls checked
	UncheckedAcks   int `json:"unchecked_acks"`    // acks past what an expired session's client saw
	UnansweredAtEnd int `json:"unanswered_at_end"` // user entries of expired sessions left without a reply
}

// NewVerifier returns an empty Verifier.
func NewVerifier(cfg VerifierConfig) *Verifier {
	if cfg.Slack <= 0 {
		cfg.Slack = 250 * time.Millisecond
	}
	return &Verifier{cfg: cfg, sessions: make(map[string]*vsession), byKind: make(map[string]int)}
}

type vsession struct {
	id      string
	seen    []entryInfo
	last    uint64
	acks    map[string]uint64
	ackSeqs map[uint64]string
	expired bool
	lost    bool // a resume was refused for another reason
	ended   bool // client ended or final
	final   bool
}

func (v *Verifier) session(id string) *vsession {
	s := v.sessions[id]
	if s == nil {
		s = &vsession{id: id, acks: make(map[string]uint64), ackSeqs: make(map[uint64]string)}
		v.sessions[id] = s
		v.counts.Sessions++
	}
	return s
}

// Feed hands the Verifier one event of session sid.
func (v *Verifier) Feed(sid string, ev Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.session(sid)
	if s.final {
		return
	}
	switch ev.Kind {
	case EvEntry:
		v.entry(s, ev.Msg)
	case EvAck:
		v.ack(s, ev.SendID, ev.Seq)
	case EvResume:
		v.resume(s, ev)
	case EvClientEnded:
		if !s.expired && !s.lost && ev.Err != nil {
			v.violate(Violation{Kind: VClientFailed, Session: sid, Seqs: []uint64{s.last}, Detail: ev.Err.Error()})
		}
		s.ended = true
	case EvFinal:
		v.finish(s, ev)
	}
}

func (v *Verifier) entry(s *vsession, m wire.Message) {
	v.counts.EntriesSeen++
	switch {
	case m.Seq <= s.last:
		v.violate(Violation{Kind: VDuplicateSeq, Session: s.id, Seqs: []uint64{s.last, m.Seq},
			Detail: fmt.Sprintf("entry %d delivered after entry %d", m.Seq, s.last)})
		return
	case m.Seq > s.last+1:
		v.violate(Violation{Kind: VGap, Session: s.id, Seqs: []uint64{s.last + 1, m.Seq - 1},
			Detail: fmt.Sprintf("entries %d..%d never delivered (got %d after %d)", s.last+1, m.Seq-1, m.Seq, s.last)})
	}
	s.last = m.Seq
	s.seen = append(s.seen, info(m))
}

func (v *Verifier) ack(s *vsession, id string, seq uint64) {
	if prev, ok := s.acks[id]; ok {
		if prev != seq {
			v.violate(Violation{Kind: VAckChanged, Session: s.id, Seqs: []uint64{prev, seq},
				Detail: fmt.Sprintf("send %s acked as %d, then as %d", id, prev, seq)})
		}
		return
	}
	if other, ok := s.ackSeqs[seq]; ok {
		v.violate(Violation{Kind: VAckChanged, Session: s.id, Seqs: []uint64{seq},
			Detail: fmt.Sprintf("seq %d acked for send %s and for send %s", seq, other, id)})
	}
	s.acks[id] = seq
	s.ackSeqs[seq] = id
	v.counts.AckedSends++
}

func (v *Verifier) resume(s *vsession, ev Event) {
	f := ev.Frame
	if f.Resumed {
		if f.LastSeq < s.last {
			v.violate(Violation{Kind: VLogTruncated, Session: s.id, Seqs: []uint64{f.LastSeq, s.last},
				Detail: fmt.Sprintf("resumed with last_seq %d but the client had seen %d", f.LastSeq, s.last)})
		}
		return
	}
	if f.Reason != wire.ReasonExpired {
		s.lost = true
		v.violate(Violation{Kind: VSessionLost, Session: s.id, Seqs: []uint64{s.last},
			Detail: fmt.Sprintf("resume answered resumed:false reason %q after %v away", f.Reason, ev.Away.Round(time.Millisecond))})
		return
	}
	window := v.cfg.Window
	if window <= 0 {
		window = time.Duration(f.WindowS * float64(time.Second))
	}
	if ev.Away < window-v.cfg.Slack {
		v.violate(Violation{Kind: VExpiredEarly, Session: s.id, Seqs: []uint64{s.last},
			Detail: fmt.Sprintf("expired after %v away; the window is %v", ev.Away.Round(time.Millisecond), window)})
	}
	if !s.expired {
		s.expired = true
		v.counts.Expired++
	}
}

// finish runs the whole-log checks: against the log read back, or, for
// an expired session, against what its client saw.
func (v *Verifier) finish(s *vsession, ev Event) {
	s.final = true
	switch {
	case s.expired || s.lost: // judged at the resume; check what was seen
		v.checkLog(s, s.seen, false)
	case ev.Err != nil || ev.Log == nil:
		why := "no log"
		if ev.Err != nil {
			why = ev.Err.Error()
		}
		v.violate(Violation{Kind: VRereadFailed, Session: s.id, Seqs: []uint64{s.last}, Detail: why})
		v.checkLog(s, s.seen, false)
	default:
		log := make([]entryInfo, 0, len(ev.Log))
		for _, m := range ev.Log {
			log = append(log, info(m))
		}
		v.counts.EntriesReread += len(log)
		v.counts.EntriesCompared += len(s.seen)
		v.counts.Verified++
		if v.compare(s, log) {
			v.checkLog(s, log, true)
		}
	}
	s.seen = nil // the summaries are no longer needed
}

// compare checks the log read back is gap-free from seq 1 and holds
// every entry the client saw, unchanged. It reports whether the log is
// sound enough for checkLog.
func (v *Verifier) compare(s *vsession, log []entryInfo) bool {
	for i, e := range log {
		if want := uint64(i + 1); e.seq != want {
			kind := VGap
			if e.seq < want {
				kind = VDuplicateSeq
			}
			v.violate(Violation{Kind: kind, Session: s.id, Seqs: []uint64{want, e.seq},
				Detail: fmt.Sprintf("log read back: entry %d where %d was due", e.seq, want)})
			return false
		}
	}
	if n := uint64(len(log)); n < s.last {
		v.violate(Violation{Kind: VLostEntries, Session: s.id, Seqs: []uint64{n + 1, s.last},
			Detail: fmt.Sprintf("log read back ends at %d; the client saw up to %d", n, s.last)})
	}
	for _, e := range s.seen {
		if e.seq > uint64(len(log)) {
			break
		}
		if got := log[e.seq-1]; got.hash != e.hash {
			v.violate(Violation{Kind: VEntryChanged, Session: s.id, Seqs: []uint64{e.seq},
				Detail: fmt.Sprintf("entry %d read back (%s: %s) differs from what the client saw (%s: %s)", e.seq, got.role, got.sketch, e.role, e.sketch)})
		}
	}
	return true
}

// checkLog checks acks, send ids, answers and tool runs on a gap-free
// run of entries (complete says it is the whole log, so that missing
// answers and acks past its end are violations).
func (v *Verifier) checkLog(s *vsession, log []entryInfo, complete bool) {
	var last uint64
	if len(log) > 0 {
		last = log[len(log)-1].seq
	}
	at := make(map[uint64]*entryInfo, len(log))
	sendSeq := make(map[string]uint64)
	answered := make(map[uint64]bool)
	type toolRuns struct{ started, outcomes []uint64 }
	tools := make(map[string]*toolRuns)
	var callOrder []string
	for i := range log {
		e := &log[i]
		at[e.seq] = e
		switch e.role {
		case wire.RoleUser:
			if prev, ok := sendSeq[e.id]; ok && e.id != "" {
				v.violate(Violation{Kind: VDuplicateSend, Session: s.id, Seqs: []uint64{prev, e.seq},
					Detail: fmt.Sprintf("send %s stored twice", e.id)})
			} else {
				sendSeq[e.id] = e.seq
			}
		case wire.RoleAgent, wire.RoleSystem:
			if e.replyTo != 0 {
				answered[e.replyTo] = true
			}
		case wire.RoleTool:
			t := tools[e.callID]
			if t == nil {
				t = &toolRuns{}
				tools[e.callID] = t
				callOrder = append(callOrder, e.callID)
			}
			if e.status == "started" {
				t.started = append(t.started, e.seq)
			} else {
				t.outcomes = append(t.outcomes, e.seq)
			}
		}
	}
	ids := make([]string, 0, len(s.acks))
	for id := range s.acks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		seq := s.acks[id]
		if seq > last && !complete {
			v.counts.UncheckedAcks++
			continue
		}
		e := at[seq]
		switch {
		case e == nil:
			v.violate(Violation{Kind: VLostAck, Session: s.id, Seqs: []uint64{seq},
				Detail: fmt.Sprintf("send %s acked as %d, which is not in the log (last %d)", id, seq, last)})
		case e.role != wire.RoleUser || e.id != id:
			v.violate(Violation{Kind: VLostAck, Session: s.id, Seqs: []uint64{seq},
				Detail: fmt.Sprintf("send %s acked as %d, but entry %d is %s %q", id, seq, seq, e.role, e.id)})
		default:
			v.counts.AcksVerified++
		}
	}
	for i := range log {
		e := &log[i]
		if e.role != wire.RoleUser {
			continue
		}
		v.counts.UserEntries++
		if answered[e.seq] {
			continue
		}
		if !complete {
			v.counts.UnansweredAtEnd++
			continue
		}
		v.violate(Violation{Kind: VUnanswered, Session: s.id, Seqs: []uint64{e.seq},
			Detail: fmt.Sprintf("user entry %d (send %s) has no reply", e.seq, e.id)})
	}
	for _, id := range callOrder {
		t := tools[id]
		v.counts.ToolCalls++
		switch {
		case len(t.started) == 0:
			v.violate(Violation{Kind: VToolNoStart, Session: s.id, Seqs: t.outcomes,
				Detail: fmt.Sprintf("tool call %s finished but never started", id)})
		case len(t.started) > 1:
			v.violate(Violation{Kind: VToolRerun, Session: s.id, Seqs: t.started,
				Detail: fmt.Sprintf("tool call %s started %d times", id, len(t.started))})
		}
		if len(t.outcomes) > 1 {
			v.violate(Violation{Kind: VToolRerun, Session: s.id, Seqs: t.outcomes,
				Detail: fmt.Sprintf("tool call %s finished %d times", id, len(t.outcomes))})
		}
	}
}

func (v *Verifier) violate(x Violation) {
	v.total++
	v.byKind[x.Kind]++
	if len(v.kept) < maxKeptViolation {
		v.kept = append(v.kept, x)
	}
	if v.cfg.OnViolation != nil {
		v.cfg.OnViolation(x)
	}
}

// Total is the number of violations found so far.
func (v *Verifier) Total() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.total
}

// Violations returns the first violations found (at most 1000), the
// count per kind and the total.
func (v *Verifier) Violations() ([]Violation, map[string]int, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	byKind := make(map[string]int, len(v.byKind))
	for k, n := range v.byKind {
		byKind[k] = n
	}
	return slices.Clone(v.kept), byKind, v.total
}

// Counts returns the Verifier's tallies.
func (v *Verifier) Counts() VerifyCounts {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.counts
}

// Expired reports whether the server said session sid expired.
func (v *Verifier) Expired(sid string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.sessions[sid]
	return s != nil && s.expired
}
