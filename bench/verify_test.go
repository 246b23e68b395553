package bench

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway/wire"
)

// A doctored stream is a good session's events with one thing broken;
// the verifier must name exactly that thing, with the session and seqs.

func userEntry(seq uint64, id string) wire.Message {
	return wire.Message{Seq: seq, Role: wire.RoleUser, Content: "message " + id, Timestamp: float64(seq),
		Metadata: map[string]any{"id": id}}
}

func toolEntry(seq uint64, call, status string, replyTo uint64) wire.Message {
	return wire.Message{Seq: seq, Role: wire.RoleTool, Content: status, Timestamp: float64(seq),
		Metadata: map[string]any{"call_id": call, "name": "search", "status": status, "reply_to": float64(replyTo)}}
}

func agentEntry(seq, replyTo uint64) wire.Message {
	return wire.Message{Seq: seq, Role: wire.RoleAgent, Content: "answer", Timestamp: float64(seq),
		Metadata: map[string]any{"reply_to": float64(replyTo)}}
}

// goodLog is two turns, each through a tool.
func goodLog() []wire.Message {
	return []wire.Message{
		userEntry(1, "m1"), toolEntry(2, "call-2", "started", 1), toolEntry(3, "call-2", "completed", 1), agentEntry(4, 1),
		userEntry(5, "m2"), toolEntry(6, "call-6", "started", 5), toolEntry(7, "call-6", "completed", 5), agentEntry(8, 5),
	}
}

var goodAcks = map[string]uint64{"m1": 1, "m2": 5}

// stream is what one session's client saw.
type stream struct {
	live []wire.Message
	acks map[string]uint64
	// resume, when set, is fed after the first half of live.
	resume *Event
	final  []wire.Message
	expire bool // no read-back: the session expired
}

func (s stream) feed(v *Verifier, sid string) {
	for i, m := range s.live {
		if s.resume != nil && i == len(s.live)/2 {
			v.Feed(sid, *s.resume)
		}
		v.Feed(sid, Event{Kind: EvEntry, Msg: m})
	}
	for id, seq := range s.acks {
		v.Feed(sid, Event{Kind: EvAck, SendID: id, Seq: seq})
	}
	if s.expire {
		v.Feed(sid, Event{Kind: EvFinal})
		return
	}
	v.Feed(sid, Event{Kind: EvFinal, Log: s.final})
}

func without(log []wire.Message, seqs ...uint64) []wire.Message {
	return slices.DeleteFunc(slices.Clone(log), func(m wire.Message) bool { return slices.Contains(seqs, m.Seq) })
}

func resumed(last uint64) *Event {
	return &Event{Kind: EvResume, Away: time.Second, Frame: wire.SessionFrame{Resumed: true, Reason: "resumed", LastSeq: last, WindowS: 5}}
}

func TestVerifierDoctoredStreams(t *testing.T) {
	good := goodLog()
	dupLive := slices.Insert(slices.Clone(good), 4, good[3]) // entry 4 twice
	rerun := slices.Clone(good)
	rerun[6] = toolEntry(7, "call-6", "started", 5) // call-6 started again instead of completing
	changed := slices.Clone(good)
	changed[1].Content = "rewritten"
	for _, tc := range []struct {
		name   string
		s      stream
		kind   string
		seqs   []uint64
		counts func(VerifyCounts) bool
	}{
		{name: "clean", s: stream{live: good, acks: goodAcks, resume: resumed(4), final: good},
			counts: func(c VerifyCounts) bool {
				return c.Verified == 1 && c.AcksVerified == 2 && c.UserEntries == 2 && c.ToolCalls == 2 && c.EntriesSeen == 8
			}},
		{name: "gap", s: stream{live: without(good, 3), acks: goodAcks, final: good},
			kind: VGap, seqs: []uint64{3, 3}},
		{name: "duplicate seq", s: stream{live: dupLive, acks: goodAcks, final: good},
			kind: VDuplicateSeq, seqs: []uint64{4, 4}},
		{name: "lost ack: acked entry missing from the log", s: stream{live: good[:4], acks: goodAcks, final: good[:4]},
			kind: VLostAck, seqs: []uint64{5}},
		{name: "lost ack: another entry at the ack's seq", s: stream{live: good, acks: map[string]uint64{"m1": 1, "m2": 6}, final: good},
			kind: VLostAck, seqs: []uint64{6}},
		{name: "unanswered", s: stream{live: good[:7], acks: goodAcks, final: good[:7]},
			kind: VUnanswered, seqs: []uint64{5}},
		{name: "tool run twice", s: stream{live: rerun, acks: goodAcks, final: rerun},
			kind: VToolRerun, seqs: []uint64{6, 7}},
		{name: "read back differs", s: stream{live: good, acks: goodAcks, final: changed},
			kind: VEntryChanged, seqs: []uint64{2}},
		{name: "read back lacks seen entries", s: stream{live: good, acks: map[string]uint64{"m1": 1}, final: good[:4]},
			kind: VLostEntries, seqs: []uint64{5, 8}},
		{name: "server forgot entries", s: stream{live: good, acks: goodAcks, resume: resumed(2), final: good},
			kind: VLogTruncated, seqs: []uint64{2, 4}},
		{name: "expired after the window is not an error",
			s: stream{live: good[:5], acks: goodAcks, expire: true, resume: &Event{Kind: EvResume, Away: 6 * time.Second,
				Frame: wire.SessionFrame{Reason: wire.ReasonExpired, WindowS: 5}}},
			counts: func(c VerifyCounts) bool { return c.Expired == 1 && c.Verified == 0 && c.UnansweredAtEnd == 1 }},
		{name: "expired before the window", s: stream{live: good[:5], acks: goodAcks, expire: true, resume: &Event{
			Kind: EvResume, Away: 2 * time.Second, Frame: wire.SessionFrame{Reason: wire.ReasonExpired, WindowS: 5}}},
			kind: VExpiredEarly, seqs: []uint64{2}},
		{name: "session not found on resume", s: stream{live: good[:4], acks: map[string]uint64{"m1": 1}, expire: true, resume: &Event{
			Kind: EvResume, Away: time.Second, Frame: wire.SessionFrame{Reason: wire.ReasonNotFound, WindowS: 5}}},
			kind: VSessionLost, seqs: []uint64{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var live []Violation
			v := NewVerifier(VerifierConfig{OnViolation: func(x Violation) { live = append(live, x) }})
			tc.s.feed(v, "sess-1")
			list, byKind, total := v.Violations()
			if tc.kind == "" {
				if total != 0 {
					t.Fatalf("violations in a good stream: %v", list)
				}
			} else {
				if total != 1 || byKind[tc.kind] != 1 {
					t.Fatalf("want exactly one %s, got %d: %v", tc.kind, total, list)
				}
				got := list[0]
				if got.Session != "sess-1" || !slices.Equal(got.Seqs, tc.seqs) || got.Detail == "" {
					t.Fatalf("violation %+v: want session sess-1 and seqs %v", got, tc.seqs)
				}
				if len(live) != 1 || live[0].Kind != tc.kind {
					t.Fatalf("OnViolation saw %v", live)
				}
			}
			if c := v.Counts(); tc.counts != nil && !tc.counts(c) {
				t.Fatalf("counts %+v", c)
			}
		})
	}
}

// A failed read-back is a violation, and so is a client that ended for a
// reason other than expiry; one session's events do not leak into
// another's.
func TestVerifierFailuresAndIsolation(t *testing.T) {
	v := NewVerifier(VerifierConfig{})
	good := goodLog()
	stream{live: good, acks: goodAcks, final: good}.feed(v, "a")
	for _, m := range good[:4] {
		v.Feed("b", Event{Kind: EvEntry, Msg: m})
	}
	v.Feed("b", Event{Kind: EvClientEnded, Err: errors.New("unauthorized")})
	v.Feed("b", Event{Kind: EvFinal, Err: errors.New("resume from seq 0: unreachable")})
	_, byKind, total := v.Violations()
	if total != 2 || byKind[VClientFailed] != 1 || byKind[VRereadFailed] != 1 {
		t.Fatalf("want client_failed and reread_failed, got %v", byKind)
	}
	if c := v.Counts(); c.Sessions != 2 || c.Verified != 1 {
		t.Fatalf("counts %+v", c)
	}
	// Events after the final one are ignored.
	v.Feed("a", Event{Kind: EvEntry, Msg: good[0]})
	if v.Total() != 2 {
		t.Fatal("an event after EvFinal was judged")
	}
}
