package machine

import (
	"fmt"
	"maps"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal/record"
)

// maxReruns is how often an idempotent call cut short by a crash is run
// again: once. A call that a second crash cuts short is logged as failed.
const maxReruns = 1

// maxSteps bounds the entries one turn logs before its reply (tool calls
// and their results, text before a call), so an engine that keeps calling
// tools cannot grow a turn (and the state that lists its steps) without
// end.
const maxSteps = 32

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// next makes the session's next entry; the seq is taken here and nowhere
// else.
func (s *Machine) next(role, content string, md map[string]any, now time.Time) record.Entry {
	s.hdr.LastSeq++
	s.hdr.LastActiveAt = now
	return record.Entry{Seq: s.hdr.LastSeq, Role: role, Content: content, Time: unixSeconds(now), Metadata: md}
}

func (s *Machine) toolEntry(c ToolCall, status, result string, now time.Time) record.Entry {
	md := map[string]any{engine.MetaCallID: c.CallID, engine.MetaName: c.Name, engine.MetaStatus: status, engine.MetaReplyTo: c.ReplyTo}
	if status == engine.ToolStarted {
		md[engine.MetaArgs] = c.Args
	} else {
		md[engine.MetaResult] = result
	}
	return s.next(engine.RoleTool, result, md, now)
}

// log appends entries and emits their delivery once durable.
func (s *Machine) log(entries ...record.Entry) {
	s.appendBatch(entries, nil, false)
	for _, e := range entries {
		s.deliver(&EntryOut{Entry: e})
	}
}

// start resumes whatever a crash or a passivation left half done: a tool
// call that was started but has no result, or turns still owed.
func (s *Machine) start(now time.Time) {
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
			s.emit(RunTool{Call: *p})
			return
		}
		e := s.toolEntry(*p, engine.ToolFailed, engine.ResultInterrupted, now)
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

func (s *Machine) send(ev Send, now time.Time) {
	if seq, ok := s.sends.seen(ev.ID); ok {
		s.deliverTo(ev.Conn, &AckOut{ID: ev.ID, Seq: seq})
		return
	}
	if s.sends.mayBeOlder(ev.ID) {
		s.now(LookupSend{Send: ev})
		return
	}
	s.newSend(ev, now)
}

func (s *Machine) sendChecked(ev SendChecked, now time.Time) {
	if ev.Found {
		s.deliverTo(ev.Send.Conn, &AckOut{ID: ev.Send.ID, Seq: ev.Seq})
		return
	}
	s.newSend(ev.Send, now)
}

func (s *Machine) newSend(ev Send, now time.Time) {
	if ev.Interrupt {
		s.cancel(0, now) // the running turn ends before this one is queued
	}
	if len(s.st.Turns) >= s.cfg.MaxTurns {
		s.deliverTo(ev.Conn, &ErrorOut{Code: CodeRateLimited, ID: ev.ID, Message: fmt.Sprintf(
			"the agent is busy: %d messages are waiting for an answer; send again later", len(s.st.Turns))})
		return
	}
	md := maps.Clone(ev.Metadata)
	if md == nil {
		md = make(map[string]any, 1)
	}
	md[engine.MetaID] = ev.ID
	// A reply being streamed ends here: its text so far is its entry, and
	// the send takes the seq after it (the rest of the reply, a later one).
	var entries []record.Entry
	if s.reply != nil {
		entries = s.endReply(s.st.Turns[0], now)
	}
	e := s.next(engine.RoleUser, ev.Content, md, now)
	entries = append(entries, e)
	s.sends.add(ev.ID, e.Seq)
	if s.cfg.Instant != nil && !s.busy {
		// The answer is known now: it goes into the same append, durable
		// with the message and shown with it.
		reply := s.next(engine.RoleAgent, s.cfg.Instant(e), map[string]any{engine.MetaReplyTo: e.Seq}, now)
		s.appendBatch(append(entries, reply), []record.Send{{ID: ev.ID, Seq: e.Seq}}, false)
		s.deliverTo(ev.Conn, &AckOut{ID: ev.ID, Seq: e.Seq})
		s.deliver(&EntryOut{Entry: e})
		s.deliver(&EntryOut{Entry: reply})
		return
	}
	s.st.Turns = append(s.st.Turns, e.Seq)
	s.stateDirty = true
	s.appendBatch(entries, []record.Send{{ID: ev.ID, Seq: e.Seq}}, false)
	if len(entries) > 1 {
		s.deliver(&EntryOut{Entry: entries[0]})
	}
	s.deliverTo(ev.Conn, &AckOut{ID: ev.ID, Seq: e.Seq})
	s.deliver(&EntryOut{Entry: e})
	if !s.busy {
		s.busy = true
		s.startStep(s.st.Turns[0])
	}
}

// action logs what the engine decided: a reply ends the turn (and starts
// the next one owed), a tool call is logged as started before it runs.
func (s *Machine) action(ev StepDone, now time.Time) {
	st := &s.st
	if s.stale(ev.Step, ev.UserSeq) {
		return // a stale answer from a step that was abandoned
	}
	if ev.Action.AgentContext != nil {
		if s.ctx.Agent == nil {
			s.ctx.Agent = make(map[string]any)
		}
		maps.Copy(s.ctx.Agent, ev.Action.AgentContext)
		s.contextDirty = true
	}
	if call := ev.Action.Call; call != nil && ev.Err == nil && len(st.Steps) < maxSteps {
		entries := s.endReply(ev.UserSeq, now) // text written before the call
		c := ToolCall{
			CallID: fmt.Sprintf("call-%d", s.hdr.LastSeq+1), Name: call.Name, Args: call.Args,
			Status: engine.ToolStarted, ReplyTo: ev.UserSeq, Idempotent: call.Idempotent,
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
		s.emit(RunTool{Call: c})
		return
	}
	var entries []record.Entry
	md := map[string]any{engine.MetaReplyTo: ev.UserSeq}
	switch {
	case ev.Err != nil:
		entries = append(s.endReply(ev.UserSeq, now), s.next(engine.RoleSystem, "agent error: "+ev.Err.Error(), md, now))
	case ev.Action.Call != nil:
		entries = append(s.endReply(ev.UserSeq, now),
			s.next(engine.RoleSystem, fmt.Sprintf("agent error: more than %d steps in one turn", maxSteps), md, now))
	default:
		// The reply's entry takes the seq its deltas named.
		s.reply = nil
		entries = []record.Entry{s.next(engine.RoleAgent, s.finalText(ev.Action.Reply), md, now)}
	}
	s.endTurn(entries)
}

// endTurn logs the entries that end the running turn and starts the next
// one owed, if any.
func (s *Machine) endTurn(entries []record.Entry) {
	st := &s.st
	st.Turns, st.Steps = st.Turns[1:], nil
	s.stateDirty = true
	s.busy = len(st.Turns) > 0
	s.log(entries...)
	if s.busy {
		s.startStep(st.Turns[0])
	}
}

func (s *Machine) toolDone(ev ToolDone, now time.Time) {
	p := s.st.Pending
	if p == nil || p.CallID != ev.CallID {
		return
	}
	status, result := engine.ToolCompleted, ev.Result
	if ev.Err != nil {
		status, result = engine.ToolFailed, ev.Err.Error()
	}
	e := s.toolEntry(*p, status, result, now)
	s.st.Pending = nil
	s.st.Steps = append(s.st.Steps, e.Seq)
	s.stateDirty = true
	s.log(e)
	s.startStep(p.ReplyTo)
}

func (s *Machine) toolProgress(ev ToolProgress, now time.Time) {
	p := s.st.Pending
	if p == nil || p.CallID != ev.CallID {
		return
	}
	p.Partial = ev.Partial
	s.hdr.LastActiveAt = now
	s.stateDirty = true
	s.appendBatch(nil, nil, false)
}

// abandonTurn drops the running turn for good (complete, expiry): a
// started tool call is logged as failed so the log never shows a call
// without an outcome.
func (s *Machine) abandonTurn(why string, now time.Time) []record.Entry {
	var entries []record.Entry
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
