package machine

import (
	"strings"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal/record"
)

// streamed is the reply a streaming engine is writing: the entry it will
// become (seq, taken when its first part came: the session's next seq),
// its parts so far (in memory only: a crash loses them and the turn runs
// again), and how many the attached client was sent.
type streamed struct {
	seq      uint64
	parts    []string
	sent     int
	flushing bool // a flush is due: parts wait for it
}

func (r *streamed) text(from int) string { return strings.Join(r.parts[from:], "") }

// startStep emits the next engine step of the turn answering userSeq.
// Each step has an id, so that what an abandoned step says is ignored.
func (s *Machine) startStep(userSeq uint64) {
	s.step++
	s.stepText, s.reply = "", nil
	s.emit(RunStep{UserSeq: userSeq, Step: s.step})
}

// stale reports whether an engine's word is from a step that is over.
func (s *Machine) stale(step, userSeq uint64) bool {
	return step != s.step || !s.busy || len(s.st.Turns) == 0 || s.st.Turns[0] != userSeq || s.st.Pending != nil
}

// part takes text of the reply being written and shows it to the client:
// at once when no flush is due, else with the next flush, so parts that
// come faster than FlushInterval go out together.
func (s *Machine) part(ev Part) {
	if ev.Step != s.step || !s.busy || s.st.Pending != nil || ev.Text == "" {
		return
	}
	if s.reply == nil {
		s.reply = &streamed{seq: s.hdr.LastSeq + 1}
	}
	s.reply.parts = append(s.reply.parts, ev.Text)
	if s.reply.flushing {
		return
	}
	s.sendParts()
	if s.cfg.FlushInterval > 0 {
		s.reply.flushing = true
		s.now(FlushAfter{After: s.cfg.FlushInterval})
	}
}

func (s *Machine) flush() {
	r := s.reply
	if r == nil || !r.flushing {
		return
	}
	r.flushing = false
	if r.sent < len(r.parts) {
		s.sendParts()
		r.flushing = true
		s.now(FlushAfter{After: s.cfg.FlushInterval})
	}
}

// sendParts delivers the parts the client has not had, as one delta.
func (s *Machine) sendParts() {
	r := s.reply
	if len(s.conns) == 0 || r.sent >= len(r.parts) {
		return
	}
	s.deliver(&DeltaOut{Seq: r.seq, From: r.sent, Part: len(r.parts) - 1, Text: r.text(r.sent)})
	r.sent = len(r.parts)
}

// catchUp gives connection c, which attached during a reply, what it
// lacks of it: the parts after the ones its hello says it holds, or all
// of them. When other connections share the session it gets the parts
// they were sent; the ones waiting for a flush go to all at once.
func (s *Machine) catchUp(c Conn, mark *StreamMark) {
	r := s.reply
	if r == nil || len(r.parts) == 0 {
		return
	}
	upTo := len(r.parts)
	if len(s.conns) > 1 {
		upTo = r.sent
	}
	from := 0
	if mark != nil && mark.Seq == r.seq && mark.Part >= 0 && mark.Part < len(r.parts) {
		from = mark.Part + 1
	}
	if from < upTo {
		s.deliverTo(c, &DeltaOut{Seq: r.seq, From: from, Part: upTo - 1, Text: strings.Join(r.parts[from:upTo], "")})
	}
	r.sent = upTo
}

// endReply logs the text streamed so far as the agent's entry (the seq
// the deltas named) when something else must be logged before the reply
// is done: a tool call, an engine error, a user's send, the end of the
// session. The turn's next text goes into a new reply, after it.
func (s *Machine) endReply(userSeq uint64, now time.Time) []record.Entry {
	r := s.reply
	if r == nil {
		return nil
	}
	s.reply = nil
	text := r.text(0)
	e := s.next(engine.RoleAgent, text, map[string]any{engine.MetaReplyTo: userSeq}, now)
	s.stepText += text
	s.st.Steps = append(s.st.Steps, e.Seq)
	s.stateDirty = true
	return []record.Entry{e}
}

// finalText is the step's reply without what a split already logged of it.
func (s *Machine) finalText(reply string) string {
	if rest, ok := strings.CutPrefix(reply, s.stepText); ok && s.stepText != "" {
		return rest
	}
	return reply
}
