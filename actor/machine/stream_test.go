package machine

import (
	"errors"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
)

var errTest = errors.New("model down")

// streaming is a new session with one send whose turn has begun (step
// emitted), parts sent at once unless flush is set.
func streaming(t *testing.T, flush time.Duration) (*Machine, *tconn) {
	t.Helper()
	s, c := newAttached(t)
	s.cfg.FlushInterval = flush
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "hi"})
	if !s.busy || s.step == 0 {
		t.Fatalf("the turn did not start: busy %v step %d", s.busy, s.step)
	}
	return s, c
}

func deltasOf(effs []Effect) []*DeltaOut {
	var ds []*DeltaOut
	for _, o := range outs(effs) {
		if d, ok := o.(*DeltaOut); ok {
			ds = append(ds, d)
		}
	}
	return ds
}

func TestSessionPartsBecomeDeltas(t *testing.T) {
	s, _ := streaming(t, 0)
	for i, w := range []string{"a ", "b "} {
		effs := s.Step(t0, Part{Step: s.step, Text: w})
		ds := deltasOf(effs)
		if len(ds) != 1 || ds[0].Seq != 2 || ds[0].From != i || ds[0].Part != i || ds[0].Text != w || len(only[Append](effs)) != 0 {
			t.Fatalf("part %d: %v", i, effs)
		}
	}
	// Parts of another step, empty parts, and parts during a tool call are
	// not shown.
	for _, ev := range []Event{Part{Step: s.step - 1, Text: "old"}, Part{Step: s.step, Text: ""}} {
		if effs := s.Step(t0, ev); len(effs) != 0 {
			t.Fatalf("%+v: %v", ev, effTypes(effs))
		}
	}
	effs := durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "a b c"}})
	e := appendedEntry(t, effs)
	if e.Seq != 2 || e.Content != "a b c" || s.reply != nil {
		t.Fatalf("final entry %+v", e)
	}
}

func TestSessionFlushCoalesces(t *testing.T) {
	s, _ := streaming(t, 50*time.Millisecond)
	effs := s.Step(t0, Part{Step: s.step, Text: "a "})
	if len(deltasOf(effs)) != 1 || len(only[FlushAfter](effs)) != 1 {
		t.Fatalf("first part: %v", effTypes(effs))
	}
	for _, w := range []string{"b ", "c "} {
		if effs := s.Step(t0, Part{Step: s.step, Text: w}); len(effs) != 0 {
			t.Fatalf("a part within the interval went out: %v", effTypes(effs))
		}
	}
	effs = s.Step(t0, Flush{})
	ds := deltasOf(effs)
	if len(ds) != 1 || ds[0].From != 1 || ds[0].Part != 2 || ds[0].Text != "b c " || len(only[FlushAfter](effs)) != 1 {
		t.Fatalf("flush: %v %+v", effTypes(effs), ds)
	}
	// Nothing new: the next flush sends nothing and arms no timer.
	if effs := s.Step(t0, Flush{}); len(effs) != 0 {
		t.Fatalf("idle flush: %v", effTypes(effs))
	}
}

func TestSessionSendSplitsReply(t *testing.T) {
	s, c := streaming(t, 0)
	s.Step(t0, Part{Step: s.step, Text: "half "})
	effs := durable(s, t0, Send{Conn: c, ID: "m2", Content: "wait"})
	ap := one[Append](t, effs)
	if len(ap.Batch.Entries) != 2 || ap.Batch.Entries[0].Role != engine.RoleAgent || ap.Batch.Entries[0].Content != "half " ||
		ap.Batch.Entries[0].Seq != 2 || ap.Batch.Entries[1].Seq != 3 || ap.Batch.Entries[1].Role != engine.RoleUser {
		t.Fatalf("split append: %+v", ap.Batch.Entries)
	}
	// The rest streams as entry 4 from part 0; its entry holds the rest.
	effs = s.Step(t0, Part{Step: s.step, Text: "rest"})
	if ds := deltasOf(effs); len(ds) != 1 || ds[0].Seq != 4 || ds[0].From != 0 {
		t.Fatalf("after the split: %+v", ds)
	}
	effs = durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "half rest"}})
	if e := appendedEntry(t, effs); e.Seq != 4 || e.Content != "rest" {
		t.Fatalf("final entry %+v", e)
	}
}

func TestSessionToolCallEndsReply(t *testing.T) {
	s, _ := streaming(t, 0)
	s.Step(t0, Part{Step: s.step, Text: "Let me look. "})
	effs := durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Call: &engine.Call{Name: "search"}}})
	ap := one[Append](t, effs)
	if len(ap.Batch.Entries) != 2 || ap.Batch.Entries[0].Content != "Let me look. " || ap.Batch.Entries[1].Role != engine.RoleTool {
		t.Fatalf("text then call: %+v", ap.Batch.Entries)
	}
	if call := one[RunTool](t, effs).Call; call.CallID != "call-3" || call.StartedSeq != 3 {
		t.Fatalf("call %+v", call)
	}
	// The engine sees the text and the started entry as this turn's steps.
	if len(s.st.Steps) != 2 || s.st.Steps[0] != 2 || s.st.Steps[1] != 3 {
		t.Fatalf("steps %v", s.st.Steps)
	}
	// Parts while the tool runs are not shown.
	if effs := s.Step(t0, Part{Step: s.step, Text: "x"}); len(effs) != 0 {
		t.Fatalf("part during a tool run: %v", effTypes(effs))
	}
}

func TestSessionErrorAndCompleteKeepStreamedText(t *testing.T) {
	s, _ := streaming(t, 0)
	s.Step(t0, Part{Step: s.step, Text: "so far"})
	effs := durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Err: errTest})
	ap := one[Append](t, effs)
	if len(ap.Batch.Entries) != 2 || ap.Batch.Entries[0].Content != "so far" || ap.Batch.Entries[1].Role != engine.RoleSystem {
		t.Fatalf("error mid-stream: %+v", ap.Batch.Entries)
	}

	s, c := streaming(t, 0)
	s.Step(t0, Part{Step: s.step, Text: "so far"})
	effs = durable(s, t0, Complete{Conn: c})
	ap = one[Append](t, effs)
	if len(ap.Batch.Entries) != 1 || ap.Batch.Entries[0].Content != "so far" || ap.Batch.Header.Status != "completed" {
		t.Fatalf("complete mid-stream: %+v", ap.Batch)
	}
}

func TestSessionAttachCatchUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mark     *StreamMark
		from     int
		text     string
		noDeltas bool
	}{
		{"no mark", nil, 0, "a b c ", false},
		{"mark", &StreamMark{Seq: 2, Part: 0}, 1, "b c ", false},
		{"mark of another seq", &StreamMark{Seq: 9, Part: 1}, 0, "a b c ", false},
		{"mark beyond the parts", &StreamMark{Seq: 2, Part: 7}, 0, "a b c ", false},
		{"holds them all", &StreamMark{Seq: 2, Part: 2}, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := streaming(t, 0)
			for _, w := range []string{"a ", "b ", "c "} {
				s.Step(t0, Part{Step: s.step, Text: w})
			}
			durable(s, t0, Detach{Conn: c})
			c2 := &tconn{"c2"}
			effs := durable(s, t0, Attach{Conn: c2, UserID: "alice", LastSeq: 1, Stream: tc.mark})
			ds := deltasOf(effs)
			if tc.noDeltas {
				if len(ds) != 0 {
					t.Fatalf("deltas %+v", ds)
				}
				return
			}
			if len(ds) != 1 || ds[0].Seq != 2 || ds[0].From != tc.from || ds[0].Part != 2 || ds[0].Text != tc.text {
				t.Fatalf("catch-up %+v", ds)
			}
			// It comes after the session frame and the replay.
			kinds := effTypes(effs)
			if i, j := indexOf(kinds, "machine.Replay"), lastIndexOfDelta(effs); i < 0 || j < i {
				t.Fatalf("catch-up before the replay: %v", kinds)
			}
		})
	}
}

func TestSessionShutdownDropsParts(t *testing.T) {
	s, _ := streaming(t, 0)
	s.Step(t0, Part{Step: s.step, Text: "lost"})
	effs := durable(s, t0, Shutdown{})
	if len(only[Append](effs)) != 0 || s.reply != nil {
		t.Fatalf("shutdown logged the parts: %v", effTypes(effs))
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

func lastIndexOfDelta(effs []Effect) int {
	for i := len(effs) - 1; i >= 0; i-- {
		if d, ok := effs[i].(Deliver); ok {
			if _, ok := d.Out.(*DeltaOut); ok {
				return i
			}
		}
	}
	return -1
}
