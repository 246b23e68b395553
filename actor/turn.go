package actor

import (
	"fmt"
	"maps"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal"
)

// maxReruns is how often an idempotent call cut short by a crash is run
// again: once. A call that a second crash cuts short is logged as failed.
const maxReruns = 1

// maxSteps bounds the entries one turn logs before its reply (tool calls
// and their results, text before a call), so an engine that keeps calling
// tools cannot grow a turn (and the state that lists its steps) without
// end.
const maxSteps = 32

// interrupted is the result logged for a non-idempotent call that a crash
// cut short.
const interrupted = "interrupted"

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// next makes the session's next entry; the seq is taken here and nowhere
// else.
func (s *Session) next(role, content string, md map[string]any, now time.Time) wal.Entry {
	s.hdr.LastSeq++
	s.hdr.LastActiveAt = now
	return wal.Entry{Seq: s.hdr.LastSeq, Role: role, Content: content, Time: unixSeconds(now), Metadata: md}
}

func (s *Session) toolEntry(c ToolCall, status, result string, now time.Time) wal.Entry {
	md := map[string]any{"call_id": c.CallID, "name": c.Name, "status": status, "reply_to": c.ReplyTo}
	if status == engine.ToolStarted {
		md["args"] = c.Args
	} else {
		md["result"] = result
	}
	return s.next(engine.RoleTool, result, md, now)
}

// log appends entries and emits their delivery once durable.
func (s *Session) log(entries ...wal.Entry) {
	s.appendBatch(entries, nil, false)
	for _, e := range entries {
		s.deliver(&EntryOut{Entry: e})
	}
}

// start resumes whatever a crash or a passivation left half done: a tool
// call that was started but has no result, or turns still owed.
func (s *Session) start(now time.Time) {
	if s.hdr.Status.Terminal() {
		return
	}
	if p := s.st.Pending; p != nil && p.Status == engine.ToolAwaitingApproval {
		s.busy = true // the turn waits for the user's decision, in the log
		return
	}
	if p := s.st.Pending; p != nil {
		if t, ok := s.cfg.Tool(p.Name); (p.Idempotent || ok && t.Idempotent) && p.Attempts < maxReruns {
			// Run it once more; the attempt is durable before the run so
			// that a second crash does not make a third.
			p.Attempts++
			s.stateDirty, s.busy = true, true
			s.appendBatch(nil, nil, false)
			s.emit(effRunTool{call: *p})
			return
		}
		e := s.toolEntry(*p, engine.ToolFailed, interrupted, now)
		s.st.Pending = nil
		s.st.Steps = append(s.st.Steps, e.Seq)
		s.stateDirty, s.busy = true, true
		s.log(e)
		s.startStep(p.ReplyTo)
		return
	}
	if len(s.st.Turns) > 0 {
		s.busy = true
		s.startStep(s.st.Turns[0])
	}
}

func (s *Session) send(ev evSend, now time.Time) {
	if seq, ok := s.sends.seen(ev.id); ok {
		s.deliverTo(ev.conn, &AckOut{ID: ev.id, Seq: seq})
		return
	}
	if s.sends.mayBeOlder(ev.id) {
		s.now(effLookupSend{send: ev})
		return
	}
	s.newSend(ev, now)
}

func (s *Session) sendChecked(ev evSendChecked, now time.Time) {
	if ev.found {
		s.deliverTo(ev.send.conn, &AckOut{ID: ev.send.id, Seq: ev.seq})
		return
	}
	s.newSend(ev.send, now)
}

func (s *Session) newSend(ev evSend, now time.Time) {
	if ev.interrupt {
		s.cancel(0, now) // the running turn ends before this one is queued
	}
	if len(s.st.Turns) >= s.cfg.MaxTurns {
		s.deliverTo(ev.conn, &ErrorOut{Code: CodeRateLimited, ID: ev.id, Message: fmt.Sprintf(
			"the agent is busy: %d messages are waiting for an answer; send again later", len(s.st.Turns))})
		return
	}
	md := maps.Clone(ev.metadata)
	if md == nil {
		md = make(map[string]any, 1)
	}
	md["id"] = ev.id
	// A reply being streamed ends here: its text so far is its entry, and
	// the send takes the seq after it (the rest of the reply, a later one).
	var entries []wal.Entry
	if s.reply != nil {
		entries = s.endReply(s.st.Turns[0], now)
	}
	e := s.next(engine.RoleUser, ev.content, md, now)
	entries = append(entries, e)
	s.sends.add(ev.id, e.Seq)
	if s.cfg.Instant != nil && !s.busy {
		// The answer is known now: it goes into the same append, durable
		// with the message and shown with it.
		reply := s.next(engine.RoleAgent, s.cfg.Instant(e), map[string]any{"reply_to": e.Seq}, now)
		s.appendBatch(append(entries, reply), []wal.Send{{ID: ev.id, Seq: e.Seq}}, false)
		s.deliverTo(ev.conn, &AckOut{ID: ev.id, Seq: e.Seq})
		s.deliver(&EntryOut{Entry: e})
		s.deliver(&EntryOut{Entry: reply})
		return
	}
	s.st.Turns = append(s.st.Turns, e.Seq)
	s.stateDirty = true
	s.appendBatch(entries, []wal.Send{{ID: ev.id, Seq: e.Seq}}, false)
	if len(entries) > 1 {
		s.deliver(&EntryOut{Entry: entries[0]})
	}
	s.deliverTo(ev.conn, &AckOut{ID: ev.id, Seq: e.Seq})
	s.deliver(&EntryOut{Entry: e})
	if !s.busy {
		s.busy = true
		s.startStep(s.st.Turns[0])
	}
}

// action logs what the engine decided: a reply ends the turn (and starts
// the next one owed), a tool call is logged as started before it runs.
func (s *Session) action(ev evAction, now time.Time) {
	st := &s.st
	if s.stale(ev.step, ev.userSeq) {
		return // a stale answer from a step that was abandoned
	}
	if ev.action.AgentContext != nil {
		if s.ctx.Agent == nil {
			s.ctx.Agent = make(map[string]any)
		}
		maps.Copy(s.ctx.Agent, ev.action.AgentContext)
		s.contextDirty = true
	}
	if call := ev.action.Call; call != nil && ev.err == nil && len(st.Steps) < maxSteps {
		entries := s.endReply(ev.userSeq, now) // text written before the call
		c := ToolCall{
			CallID: fmt.Sprintf("call-%d", s.hdr.LastSeq+1), Name: call.Name, Args: call.Args,
			Status: engine.ToolStarted, ReplyTo: ev.userSeq, Idempotent: call.Idempotent,
		}
		t, declared := s.cfg.Tool(c.Name)
		c.Sensitive = call.Sensitive || declared && t.Sensitive
		if call.Approval || declared && t.Approval {
			s.awaitApproval(c, entries, now)
			return
		}
		e := s.toolEntry(c, engine.ToolStarted, "", now)
		c.StartedSeq = e.Seq
		st.Steps = append(st.Steps, e.Seq)
		st.Pending = &c
		if c.Sensitive {
			s.hdr.Sensitive = true
		}
		s.stateDirty = true
		s.log(append(entries, e)...)
		s.emit(effRunTool{call: c})
		return
	}
	var entries []wal.Entry
	md := map[string]any{"reply_to": ev.userSeq}
	switch {
	case ev.err != nil:
		entries = append(s.endReply(ev.userSeq, now), s.next(engine.RoleSystem, "agent error: "+ev.err.Error(), md, now))
	case ev.action.Call != nil:
		entries = append(s.endReply(ev.userSeq, now),
			s.next(engine.RoleSystem, fmt.Sprintf("agent error: more than %d steps in one turn", maxSteps), md, now))
	default:
		// The reply's entry takes the seq its deltas named.
		s.reply = nil
		entries = []wal.Entry{s.next(engine.RoleAgent, s.finalText(ev.action.Reply), md, now)}
	}
	s.endTurn(entries)
}

// endTurn logs the entries that end the running turn and starts the next
// one owed, if any.
func (s *Session) endTurn(entries []wal.Entry) {
	st := &s.st
	st.Turns, st.Steps = st.Turns[1:], nil
	s.stateDirty = true
	s.busy = len(st.Turns) > 0
	s.log(entries...)
	if s.busy {
		s.startStep(st.Turns[0])
	}
}

func (s *Session) toolDone(ev evToolDone, now time.Time) {
	p := s.st.Pending
	if p == nil || p.CallID != ev.callID {
		return
	}
	status, result := engine.ToolCompleted, ev.result
	if ev.err != nil {
		status, result = engine.ToolFailed, ev.err.Error()
	}
	e := s.toolEntry(*p, status, result, now)
	s.st.Pending = nil
	s.st.Steps = append(s.st.Steps, e.Seq)
	s.stateDirty = true
	s.log(e)
	s.startStep(p.ReplyTo)
}

func (s *Session) toolProgress(ev evToolProgress, now time.Time) {
	p := s.st.Pending
	if p == nil || p.CallID != ev.callID {
		return
	}
	p.Partial = ev.partial
	s.hdr.LastActiveAt = now
	s.stateDirty = true
	s.appendBatch(nil, nil, false)
}

// abandonTurn drops the running turn for good (complete, expiry): a
// started tool call is logged as failed so the log never shows a call
// without an outcome.
func (s *Session) abandonTurn(why string, now time.Time) []wal.Entry {
	var entries []wal.Entry
	if len(s.st.Turns) > 0 {
		entries = s.endReply(s.st.Turns[0], now)
	}
	s.reply = nil
	if p := s.st.Pending; p != nil {
		entries = append(entries, s.toolEntry(*p, engine.ToolFailed, why, now))
		s.st.Pending = nil
	}
	s.st.Turns, s.st.Steps = nil, nil
	s.stateDirty = true
	s.busy = false
	return entries
}
