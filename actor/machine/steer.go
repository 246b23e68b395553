package machine

import (
	"fmt"
	"slices"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal/record"
)

// Steering a turn from the client (PROTOCOL.md: cancel, approve, send
// with interrupt). Stop is not disconnect: only these events end a turn
// early, and what the turn produced before stays in the log.

// cancel stops the turn answering replyTo (0: the one running). The
// running turn's streamed text becomes its agent entry marked cancelled
// (or, with none, a system entry "cancelled"), a started tool call is
// logged failed "cancelled", and the turns queued behind it go on. A turn
// still queued is dropped with a system entry. A cancel for a turn that
// already ended, or when none runs, does nothing.
func (s *Machine) cancel(replyTo uint64, now time.Time) {
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
	s.now(CancelTurn{})
	entries := s.endReply(userSeq, now)
	if len(entries) > 0 {
		entries[0].Metadata[engine.MetaCancelled] = true
	}
	if p := st.Pending; p != nil {
		entries = append(entries, s.toolEntry(*p, engine.ToolFailed, engine.ResultCancelled, now))
		st.Pending = nil
	}
	if len(entries) == 0 || entries[0].Role != engine.RoleAgent {
		entries = append(entries, s.cancelledNote(userSeq, now))
	}
	s.reply = nil
	s.endTurn(entries)
}

func (s *Machine) cancelledNote(userSeq uint64, now time.Time) record.Entry {
	return s.next(engine.RoleSystem, engine.ResultCancelled, map[string]any{engine.MetaCancelled: true, engine.MetaReplyTo: userSeq}, now)
}

// awaitApproval logs call c as waiting for the user's decision. The turn
// then waits in the log, not in memory: nothing runs, and the session may
// passivate, restart or fail over meanwhile (idle counts it as idle).
func (s *Machine) awaitApproval(c ToolCall, before []record.Entry, now time.Time) {
	c.Status = engine.ToolAwaitingApproval
	e := s.next(engine.RoleTool, "", map[string]any{
		"call_id": c.CallID, engine.MetaName: c.Name, engine.MetaStatus: engine.ToolAwaitingApproval, engine.MetaArgs: c.Args, engine.MetaReplyTo: c.ReplyTo,
	}, now)
	c.StartedSeq = e.Seq
	s.st.Steps = append(s.st.Steps, e.Seq)
	s.st.Pending = &c
	s.stateDirty = true
	s.log(append(before, e)...)
}

// awaiting reports whether the turn waits for an approval.
func (s *Machine) awaiting() bool {
	return s.st.Pending != nil && s.st.Pending.Status == engine.ToolAwaitingApproval
}

// approve takes the user's decision on the call waiting for it: logged
// approved or denied, by the session's user; an approved call then runs,
// a denied one does not and the engine is asked for the next step knowing
// it. The first decision stands: a later one for the same call does
// nothing. A call that never waited is a bad request.
func (s *Machine) approve(ev Approve, now time.Time) {
	p := s.st.Pending
	switch {
	case p != nil && p.CallID == ev.CallID && p.Status == engine.ToolAwaitingApproval:
	case p != nil && p.CallID == ev.CallID, s.decided(ev.CallID):
		return
	default:
		s.deliverTo(ev.Conn, &ErrorOut{Code: CodeBadRequest, Message: fmt.Sprintf(
			"no tool call %q is waiting for approval", ev.CallID)})
		return
	}
	status := engine.ToolDenied
	if ev.Approved {
		status = engine.ToolApproved
	}
	c := *p
	d := s.next(engine.RoleTool, status, map[string]any{
		"call_id": c.CallID, engine.MetaName: c.Name, engine.MetaStatus: status, engine.MetaBy: s.hdr.UserID, engine.MetaReplyTo: c.ReplyTo,
	}, now)
	s.st.Steps = append(s.st.Steps, d.Seq)
	s.stateDirty = true
	if !ev.Approved {
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
	s.emit(RunTool{Call: c})
}

// decided reports whether the log's newest entries hold a decision on
// callID (an approve after the call finished).
func (s *Machine) decided(callID string) bool {
	for i := s.tail.len() - 1; i >= 0; i-- {
		e := s.tail.at(i)
		if e.Role != engine.RoleTool || e.Metadata[engine.MetaCallID] != callID {
			continue
		}
		if st := e.Metadata[engine.MetaStatus]; st == engine.ToolApproved || st == engine.ToolDenied {
			return true
		}
	}
	for _, u := range s.unstable {
		for _, e := range u.entries {
			if e.Role == engine.RoleTool && e.Metadata[engine.MetaCallID] == callID && e.Metadata[engine.MetaStatus] != engine.ToolAwaitingApproval {
				return true
			}
		}
	}
	return false
}
