package actor

import (
	"fmt"
	"maps"
	"time"

	"github.com/tether-dev/tether/wal"
)

// Entry roles.
const (
	RoleUser   = "user"
	RoleAgent  = "agent"
	RoleTool   = "tool"
	RoleSystem = "system"
)

// Tool entry statuses.
const (
	ToolStarted   = "started"
	ToolCompleted = "completed"
	ToolFailed    = "failed"
)

// maxReruns is how often an idempotent call cut short by a crash is run
// again: once. A call that a second crash cuts short is logged as failed.
const maxReruns = 1

// interrupted is the result logged for a non-idempotent call that a crash
// cut short.
const interrupted = "interrupted"

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// next makes the session's next entry; the seq is taken here and nowhere
// else.
func (s *Session) next(role, content string, md map[string]any, now time.Time) wal.Entry {
	s.meta.LastSeq++
	s.meta.LastActiveAt = now
	return wal.Entry{Seq: s.meta.LastSeq, Role: role, Content: content, Time: unixSeconds(now), Metadata: md}
}

func (s *Session) toolEntry(c wal.ToolCall, status, result string, now time.Time) wal.Entry {
	md := map[string]any{"call_id": c.CallID, "name": c.Name, "status": status, "reply_to": c.ReplyTo}
	if status == ToolStarted {
		md["args"] = c.Args
	} else {
		md["result"] = result
	}
	return s.next(RoleTool, result, md, now)
}

// deliver appends effDeliver of every entry to the attached connection.
func (s *Session) deliver(effs []Effect, entries ...wal.Entry) []Effect {
	if s.conn == nil {
		return effs
	}
	for _, e := range entries {
		effs = append(effs, effDeliver{conn: s.conn, out: &EntryOut{Entry: e}})
	}
	return effs
}

// start resumes whatever a crash or a passivation left half done: a tool
// call that was started but has no result, or turns still owed.
func (s *Session) start(now time.Time) []Effect {
	m := &s.meta
	if m.Status.Terminal() {
		return nil
	}
	if p := m.Pending; p != nil {
		if t, ok := s.cfg.Tool(p.Name); ok && t.Idempotent && p.Attempts < maxReruns {
			// Run it once more; the attempt is durable before the run so
			// that a second crash does not make a third.
			p.Attempts++
			s.busy = true
			return []Effect{s.appendMeta(), effRunTool{call: *p}}
		}
		e := s.toolEntry(*p, ToolFailed, interrupted, now)
		m.Pending = nil
		m.Steps = append(m.Steps, e.Seq)
		s.busy = true
		return []Effect{effAppend{entries: []wal.Entry{e}, meta: s.meta}, effStep{userSeq: p.ReplyTo}}
	}
	if len(m.Turns) > 0 {
		s.busy = true
		return []Effect{effStep{userSeq: m.Turns[0]}}
	}
	return nil
}

func (s *Session) send(ev evSend) []Effect {
	if ev.prevSeq != 0 {
		return []Effect{effDeliver{conn: s.conn, out: &AckOut{ID: ev.id, Seq: ev.prevSeq}}}
	}
	md := maps.Clone(ev.metadata)
	if md == nil {
		md = make(map[string]any, 1)
	}
	md["id"] = ev.id
	e := s.next(RoleUser, ev.content, md, ev.now)
	s.meta.Turns = append(s.meta.Turns, e.Seq)
	effs := []Effect{
		effAppend{entries: []wal.Entry{e}, sends: map[string]uint64{ev.id: e.Seq}, meta: s.meta},
		effDeliver{conn: s.conn, out: &AckOut{ID: ev.id, Seq: e.Seq}},
		effDeliver{conn: s.conn, out: &EntryOut{Entry: e}},
	}
	if !s.busy {
		s.busy = true
		effs = append(effs, effStep{userSeq: s.meta.Turns[0]})
	}
	return effs
}

// action logs what the engine decided: a reply ends the turn (and starts
// the next one owed), a tool call is logged as started before it runs.
func (s *Session) action(ev evAction) []Effect {
	m := &s.meta
	if !s.busy || len(m.Turns) == 0 || m.Turns[0] != ev.userSeq || m.Pending != nil {
		return nil // a stale answer from a turn that was abandoned
	}
	if ev.action.AgentContext != nil {
		if m.AgentContext == nil {
			m.AgentContext = make(map[string]any)
		}
		maps.Copy(m.AgentContext, ev.action.AgentContext)
	}
	if call := ev.action.Call; call != nil && ev.err == nil {
		c := wal.ToolCall{
			CallID: fmt.Sprintf("call-%d", m.LastSeq+1), Name: call.Name, Args: call.Args,
			Status: ToolStarted, ReplyTo: ev.userSeq,
		}
		e := s.toolEntry(c, ToolStarted, "", ev.now)
		c.StartedSeq = e.Seq
		m.Pending = &c
		if t, ok := s.cfg.Tool(c.Name); ok && t.Sensitive {
			m.Sensitive = true
		}
		effs := []Effect{effAppend{entries: []wal.Entry{e}, meta: s.meta}}
		return append(s.deliver(effs, e), effRunTool{call: c})
	}
	var e wal.Entry
	if ev.err != nil {
		e = s.next(RoleSystem, "agent error: "+ev.err.Error(), map[string]any{"reply_to": ev.userSeq}, ev.now)
	} else {
		e = s.next(RoleAgent, ev.action.Reply, map[string]any{"reply_to": ev.userSeq}, ev.now)
	}
	m.Turns, m.Steps = m.Turns[1:], nil
	s.busy = len(m.Turns) > 0
	effs := s.deliver([]Effect{effAppend{entries: []wal.Entry{e}, meta: s.meta}}, e)
	if s.busy {
		effs = append(effs, effStep{userSeq: m.Turns[0]})
	}
	return effs
}

func (s *Session) toolDone(ev evToolDone) []Effect {
	m := &s.meta
	p := m.Pending
	if p == nil || p.CallID != ev.callID {
		return nil
	}
	status, result := ToolCompleted, ev.result
	if ev.err != nil {
		status, result = ToolFailed, ev.err.Error()
	}
	e := s.toolEntry(*p, status, result, ev.now)
	m.Pending = nil
	m.Steps = append(m.Steps, e.Seq)
	effs := s.deliver([]Effect{effAppend{entries: []wal.Entry{e}, meta: s.meta}}, e)
	return append(effs, effStep{userSeq: p.ReplyTo})
}

func (s *Session) toolProgress(ev evToolProgress) []Effect {
	p := s.meta.Pending
	if p == nil || p.CallID != ev.callID {
		return nil
	}
	p.Partial = ev.partial
	return []Effect{s.appendMeta()}
}

// abandonTurn drops the running turn for good (complete, expiry): a
// started tool call is logged as failed so the log never shows a call
// without an outcome.
func (s *Session) abandonTurn(why string, now time.Time) []wal.Entry {
	var entries []wal.Entry
	if p := s.meta.Pending; p != nil {
		entries = append(entries, s.toolEntry(*p, ToolFailed, why, now))
		s.meta.Pending = nil
	}
	s.meta.Turns, s.meta.Steps = nil, nil
	s.busy = false
	return entries
}
