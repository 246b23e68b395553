package client

import (
	"slices"

	"github.com/tether-dev/tether/gateway/wire"
)

// maxPage is the most entries one history request returns (PROTOCOL.md).
const maxPage = 200

// event handles what a reader produced.
func (m *manager) event(ev event) {
	s := ev.s
	if s != m.sock {
		return // cannot happen: a socket's reader is stopped before it is dropped
	}
	if ev.err != nil {
		m.lost(ev.err)
		return
	}
	if s.pingAt != 0 {
		// Any frame answers the ping: the heartbeat starts over.
		s.pingAt = 0
		m.heartbeat()
	}
	// Once an entry is known to exist, the parts streamed for it are
	// superseded.
	defer func() { m.superseded(m.high) }()
	switch f := ev.f.(type) {
	case *wire.SessionFrame:
		m.onSession(s, f)
	case *wire.HistoryBatch:
		m.onBatch(s, f)
	case *wire.Message:
		m.onMessage(s, f)
	case *wire.Ack:
		if cl := m.sends[f.ID]; cl != nil {
			delete(m.sends, f.ID)
			m.retries = 0
			m.answer(cl, result{seq: f.Seq})
		}
	case *wire.ContextFrame:
		if len(s.ctxq) == 0 {
			m.c.log.Warn("tether: context frame nobody asked for")
			return
		}
		cl := s.ctxq[0]
		s.ctxq = s.ctxq[1:]
		m.calls = slices.DeleteFunc(m.calls, func(x *call) bool { return x == cl })
		m.answer(cl, result{context: f.Context})
	case *wire.CompletedFrame:
		m.completed = true
		m.calls = slices.DeleteFunc(m.calls, func(x *call) bool {
			if x.kind == kindComplete {
				m.answer(x, result{})
				return true
			}
			return false
		})
	case *wire.Delta:
		m.onDelta(s, f)
	case *wire.ErrorFrame:
		m.onError(s, f)
	}
}

func (m *manager) onError(s *sock, f *wire.ErrorFrame) {
	se := &ServerError{Code: f.Code, Message: f.Message, ID: f.ID}
	if cl := m.sends[f.ID]; f.ID != "" && cl != nil {
		if f.Code == wire.CodeRateLimited {
			// Nothing was stored; the same id goes out again shortly.
			cl.retryWait = true
			if !m.retryOn {
				m.retries++
				m.retry.Reset(m.backoff(m.retries))
				m.retryOn = true
			}
			return
		}
		delete(m.sends, f.ID)
		m.answer(cl, result{err: se})
		return
	}
	s.srvErr = se
	m.c.log.Warn("tether server error", "code", f.Code, "message", f.Message, "id", f.ID)
}

func (m *manager) onSession(s *sock, f *wire.SessionFrame) {
	if s.phase != phaseHello {
		m.c.log.Warn("tether: unexpected session frame", "session", f.SessionID)
		return
	}
	if m.cfg.OnSession != nil {
		m.cfg.OnSession(*f)
	}
	if asked := m.sid; asked != "" && !(f.Resumed && f.SessionID == asked) {
		completing := slices.ContainsFunc(m.calls, func(x *call) bool { return x.kind == kindComplete })
		if f.Reason == "completed" && (completing || m.completed) {
			m.end(ErrCompleted) // our complete went through before the drop
			return
		}
		m.end(&SessionLostError{SessionID: asked, Reason: f.Reason, NewSessionID: f.SessionID})
		return
	}
	if m.sid == "" {
		m.sid = f.SessionID
		m.c.setSessionID(f.SessionID)
	}
	m.high = max(m.high, f.LastSeq)
	if f.Resumed {
		s.phase = phaseReplay
		return
	}
	m.attach(s)
}

func (m *manager) onBatch(s *sock, b *wire.HistoryBatch) {
	switch {
	case s.phase == phaseReplay:
		m.replay(b)
		m.attach(s)
	case s.phase == phaseReady && len(s.histq) > 0:
		cl := s.histq[0]
		s.histq = s.histq[1:]
		if cl == nil {
			m.page(s, b)
			return
		}
		m.calls = slices.DeleteFunc(m.calls, func(x *call) bool { return x == cl })
		m.answer(cl, result{batch: *b})
	default:
		m.c.log.Warn("tether: history_batch nobody asked for", "first_seq", b.FirstSeq, "last_seq", b.LastSeq)
	}
}

// replay takes a resume's history_batch. Entries that do not follow on
// (those before them were omitted, or there is no room) are left for
// fillMore to page in.
func (m *manager) replay(b *wire.HistoryBatch) {
	for i := range b.Messages {
		msg := &b.Messages[i]
		msg.Type = wire.TypeMessage
		m.resolveByEntry(msg)
		switch {
		case msg.Seq <= m.last:
			m.c.dups.Add(1)
		case msg.Seq == m.last+1 && m.room():
			m.push(*msg)
		default:
			m.high = max(m.high, msg.Seq)
		}
	}
	m.high = max(m.high, b.LastSeq)
}

// onMessage takes a live entry: the next one is queued, an old one is a
// duplicate, one past a hole we know of (we are paging) waits for the
// paging, and any other is a gap: reconnect and resume from m.last.
func (m *manager) onMessage(s *sock, msg *wire.Message) {
	if s.phase != phaseReady {
		m.c.log.Warn("tether: message before the session was attached", "seq", msg.Seq)
		m.high = max(m.high, msg.Seq)
		return
	}
	m.resolveByEntry(msg)
	switch {
	case msg.Seq <= m.last:
		m.c.dups.Add(1)
	case msg.Seq == m.last+1 && m.room():
		m.push(*msg)
	case msg.Seq == m.last+1 || m.high > m.last:
		m.high = max(m.high, msg.Seq)
		m.fillMore()
	default:
		m.c.gaps.Add(1)
		m.c.log.Warn("tether: gap in the message stream; resuming", "last_seq", m.last, "got", msg.Seq)
		m.lost(errGap)
	}
}

// page takes an internal history page asked for by fillMore.
func (m *manager) page(s *sock, b *wire.HistoryBatch) {
	s.filling = false
	progressed := false
	for i := range b.Messages {
		msg := &b.Messages[i]
		msg.Type = wire.TypeMessage
		m.resolveByEntry(msg)
		if msg.Seq <= m.last {
			m.c.dups.Add(1)
			continue
		}
		if !m.room() {
			break
		}
		if msg.Seq > m.last+1 {
			// The server's own log lacks these: there is nothing to wait for.
			m.c.gaps.Add(1)
			m.c.log.Error("tether: entries missing from the server's log", "from", m.last+1, "to", msg.Seq-1)
		}
		m.push(*msg)
		progressed = true
	}
	if !progressed && m.room() {
		m.c.log.Error("tether: the server has no entries after our last", "last_seq", m.last, "expected", m.high)
		m.high = m.last
	}
	m.fillMore()
}

// fillMore asks for the next page of entries the client knows exist but
// has not queued, once there is room for a fair part of it.
func (m *manager) fillMore() {
	s := m.sock
	if s == nil || s.phase != phaseReady || s.filling || m.high <= m.last {
		return
	}
	room := uint64(m.cfg.MessageBuffer - len(m.queue))
	want := min(m.high-m.last, maxPage)
	if room < min(want, max(uint64(m.cfg.MessageBuffer)/4, 1)) {
		return
	}
	n := min(want, room)
	s.filling = true
	s.histq = append(s.histq, nil)
	f, _ := newCall(kindHistory, wire.ClientFrame{Type: wire.TypeHistory, BeforeSeq: m.last + n + 1, Limit: int(n)})
	m.writeData(s, f.data)
}

func (m *manager) room() bool { return len(m.queue) < m.cfg.MessageBuffer }

func (m *manager) push(msg wire.Message) {
	m.queue = append(m.queue, msg)
	m.last = msg.Seq
	m.high = max(m.high, msg.Seq)
}

// pop: the head of the queue was delivered.
func (m *manager) pop() {
	m.c.delivered.Store(m.queue[0].Seq)
	m.queue[0] = wire.Message{}
	m.queue = m.queue[1:]
	if len(m.queue) == 0 {
		m.queue = nil
	}
	m.fillMore()
}

// resolveByEntry answers a pending send from its own log entry (a user
// entry carries its send id): after a drop, the replay can prove a send
// durable before the resend's ack does.
func (m *manager) resolveByEntry(msg *wire.Message) {
	if msg.Role != "user" || len(m.sends) == 0 {
		return
	}
	id, _ := msg.Metadata["id"].(string)
	if cl := m.sends[id]; cl != nil {
		delete(m.sends, id)
		m.answer(cl, result{seq: msg.Seq})
	}
}
