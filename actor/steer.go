package actor

import (
	"fmt"
	"slices"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal"
)

// Steering a turn from the client (PROTOCOL.md: cancel, approve, send
// with interrupt). Stop is not disconnect: only these events end a turn
// early, and what the turn produced before stays in the log.

// Cancelled is the result logged for a tool call a cancel cut short, and
// the content of the system entry of a cancelled turn that had shown no
// text.
const Cancelled = "cancelled"

// cancel stops the turn answering replyTo (0: the one running). The
// running turn's streamed text becomes its agent entry marked cancelled
// (or, with none, a system entry "cancelled"), a started tool call is
// logged failed "cancelled", and the turns queued behind it go on. A turn
// still queued is dropped with a system entry. A cancel for a turn that
// already ended, or when none runs, does nothing.
func (s *Session) cancel(replyTo uint64, now time.Time) {
	st := &s.st
	if len(st.Turns) == 0 || !s.busy {
		return
	}
	if replyTo != 0 && replyTo != st.Turns[0] {
		i := slices.Index(st.Turns, replyTo)
		if i < 0 {
			return // ended already, or never a turn
		}
		st.Turns = slices.Delete(st.Turns, i, i+1)
		s.stateDirty = true
		s.log(s.cancelledNote(replyTo, now))
		return
	}
	userSeq := st.Turns[0]
	s.now(effCancelTurn{})
	entries := s.endReply(userSeq, now)
	if len(entries) > 0 {
		entries[0].Metadata["cancelled"] = true
	}
	if p := st.Pending; p != nil {
		entries = append(entries, s.toolEntry(*p, engine.ToolFailed, Cancelled, now))
		st.Pending = nil
	}
	if len(entries) == 0 || entries[0].Role != engine.RoleAgent {
		entries = append(entries, s.cancelledNote(userSeq, now))
	}
	s.reply = nil
	s.endTurn(entries)
}

func (s *Session) cancelledNote(userSeq uint64, now time.Time) wal.Entry {
	return s.next(engine.RoleSystem, Cancelled, map[string]any{"cancelled": true, "reply_to": userSeq}, now)
}

// awaitApproval logs call c as waiting for the user's decision. The turn
// then waits in the log, not in memory: nothing runs, and the session may
// passivate, restart or fail over meanwhile (idle counts it as idle).
func (s *Session) awaitApproval(c ToolCall, before []wal.Entry, now time.Time) {
	c.Status = engine.ToolAwaitingApproval
	e := s.next(engine.RoleTool, "", map[string]any{
		"call_id": c.CallID, "name": c.Name, "status": engine.ToolAwaitingApproval, "args": c.Args, "reply_to": c.ReplyTo,
	}, now)
	c.StartedSeq = e.Seq
	s.st.Steps = append(s.st.Steps, e.Seq)
	s.st.Pending = &c
	s.stateDirty = true
	s.log(append(before, e)...)
}

// awaiting reports whether the turn waits for an approval.
func (s *Session) awaiting() bool {
	return s.st.Pending != nil && s.st.Pending.Status == engine.ToolAwaitingApproval
}

// approve takes the user's decision on the call waiting for it: logged
// approved or denied, by the session's user; an approved call then runs,
// a denied one does not and the engine is asked for the next step knowing
// it. The first decision stands: a later one for the same call does
// nothing. A call that never waited is a bad request.
func (s *Session) approve(ev evApprove, now time.Time) {
	p := s.st.Pending
	switch {
	case p != nil && p.CallID == ev.callID && p.Status == engine.ToolAwaitingApproval:
	case p != nil && p.CallID == ev.callID, s.decided(ev.callID):
		return
	default:
		s.deliverTo(ev.conn, &ErrorOut{Code: CodeBadRequest, Message: fmt.Sprintf(
			"no tool call %q is waiting for approval", ev.callID)})
		return
	}
	status := engine.ToolDenied
	if ev.approved {
		status = engine.ToolApproved
	}
	c := *p
	d := s.next(engine.RoleTool, status, map[string]any{
		"call_id": c.CallID, "name": c.Name, "status": status, "by": s.hdr.UserID, "reply_to": c.ReplyTo,
	}, now)
	s.st.Steps = append(s.st.Steps, d.Seq)
	s.stateDirty = true
	if !ev.approved {
		s.st.Pending = nil
		s.log(d)
		s.startStep(c.ReplyTo)
		return
	}
	c.Status = engine.ToolStarted
	e := s.toolEntry(c, engine.ToolStarted, "", now)
	c.StartedSeq = e.Seq
	s.st.Steps = append(s.st.Steps, e.Seq)
	s.st.Pending = &c
	if t, ok := s.cfg.Tool(c.Name); c.Sensitive || ok && t.Sensitive {
		s.hdr.Sensitive = true
	}
	s.log(d, e)
	s.emit(effRunTool{call: c})
}

// decided reports whether the log's newest entries hold a decision on
// callID (an approve after the call finished).
func (s *Session) decided(callID string) bool {
	for i := s.tail.len() - 1; i >= 0; i-- {
		e := s.tail.at(i)
		if e.Role != engine.RoleTool || e.Metadata["call_id"] != callID {
			continue
		}
		if st := e.Metadata["status"]; st == engine.ToolApproved || st == engine.ToolDenied {
			return true
		}
	}
	for _, u := range s.unstable {
		for _, e := range u.entries {
			if e.Role == engine.RoleTool && e.Metadata["call_id"] == callID && e.Metadata["status"] != engine.ToolAwaitingApproval {
				return true
			}
		}
	}
	return false
}
