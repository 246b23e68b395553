package machine

import (
	"maps"

	"github.com/tether-dev/tether/actor/engine"
)

// MaxHistoryLimit caps one history page.
const MaxHistoryLimit = 200

// DefaultHistoryLimit is a history page when the client names no limit.
const DefaultHistoryLimit = 50

// DefaultReplayLimit caps a resume's history_batch when Config names no
// limit.
const DefaultReplayLimit = 50

// fill completes an effect that reads the log as it is released: its
// spans (the bounds, and the entries memory holds) and the contexts a
// step sees. Filling on release rather than on emission is what makes a
// held effect see every entry that became durable while it waited.
func (s *Machine) fill(e Effect) Effect {
	switch e := e.(type) {
	case Replay:
		from := e.After + 1
		if missed := e.Last - e.After; missed > uint64(s.cfg.ReplayLimit) {
			from = e.Last - uint64(s.cfg.ReplayLimit) + 1
		}
		e.Messages = s.span(from, e.Last+1)
		if e.After < e.Last {
			e.First = s.span(e.After+1, e.After+2)
		}
		return e
	case History:
		limit := e.Limit
		if limit <= 0 {
			limit = DefaultHistoryLimit
		}
		limit = min(limit, MaxHistoryLimit)
		before := e.Before
		if last := s.durableSeq(); before == 0 || before > last+1 {
			before = last + 1
		}
		e.Messages = s.span(before-min(before-1, uint64(limit)), before)
		return e
	case RunStep:
		e.Input.SessionID, e.Input.UserID = s.hdr.SessionID, s.hdr.UserID
		e.Input.Context, e.Input.AgentContext = maps.Clone(s.ctx.User), maps.Clone(s.ctx.Agent)
		e.User = s.span(e.UserSeq, e.UserSeq+1)
		e.Steps = make([]Span, len(s.st.Steps))
		for i, seq := range s.st.Steps {
			e.Steps[i] = s.span(seq, seq+1)
		}
		from := e.UserSeq - min(e.UserSeq-1, engine.HistoryLen)
		e.History = s.span(from, e.UserSeq)
		if from > 1 {
			e.First = s.span(1, 2)
		}
		return e
	case RunTool:
		e.SessionID, e.UserID = s.hdr.SessionID, s.hdr.UserID
		return e
	case Report:
		v := View{Header: s.hdr, Context: maps.Clone(s.ctx.User), AgentContext: maps.Clone(s.ctx.Agent)}
		last := s.durableSeq()
		v.Header.LastSeq = last
		if p := s.st.Pending; p != nil {
			cp := *p
			v.Pending = &cp
		}
		v.Messages = s.span(last-min(last, uint64(s.cfg.ReplayLimit))+1, last+1)
		e.View = v
		return e
	}
	return e
}

// span is the entries lo <= seq < hi that are durable, with those memory
// holds copied in: the newest ones, since the tail holds the newest
// durable entries. A tail that does not reach hi (it cannot happen, but a
// gap resets it) leaves the whole span to the journal.
func (s *Machine) span(lo, hi uint64) Span {
	hi = min(hi, s.durableSeq()+1)
	if lo >= hi {
		return Span{Lo: lo, Hi: lo}
	}
	held, n := s.tail.sized(lo, hi)
	if len(held) > 0 && held[len(held)-1].Seq != hi-1 {
		held, n = nil, 0
	}
	return Span{Lo: lo, Hi: hi, Held: held, HeldBytes: n}
}
