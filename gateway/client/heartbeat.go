package client

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tether-dev/tether/gateway/wire"
)

// The heartbeat of an attached socket is one timer on the manager, not a
// timer per frame: it wakes when the socket has been silent for PingAfter
// (then a ping goes out), when a ping has waited PongTimeout, or when the
// oldest unacked send has waited AckTimeout, and re-arms for whichever
// comes next. Any frame from the server — a pong, or anything else —
// counts as an answer.

func (m *manager) beatC() <-chan time.Time {
	if m.beatOn {
		return m.beat.C
	}
	return nil
}

func (m *manager) stopBeat() {
	m.beat.Stop()
	m.beatOn = false
}

// now is the time since the client's epoch, the clock of heard marks.
func (m *manager) now() time.Duration { return time.Since(m.c.epoch) }

// beatAtMost makes the heartbeat timer fire no later than at.
func (m *manager) beatAtMost(at time.Duration) {
	if m.beatOn && m.beatAt <= at {
		return
	}
	m.beatAt = at
	m.beat.Reset(max(at-m.now(), 0))
	m.beatOn = true
}

// heartbeat checks the attached socket's deadlines, pings it when it has
// been silent, and re-arms for the next deadline.
func (m *manager) heartbeat() {
	s := m.sock
	if s == nil || s.phase != phaseReady {
		return
	}
	now := m.now()
	heard := time.Duration(s.heard.Load())
	if s.pingAt != 0 && heard >= s.pingAt {
		s.pingAt = 0 // answered
	}
	var next time.Duration
	switch {
	case s.pingAt != 0 && now-s.pingAt >= m.cfg.PongTimeout:
		m.c.silent.Add(1)
		m.lost(fmt.Errorf("%w: no answer within %v to a ping sent after %v without a frame", ErrSilent, m.cfg.PongTimeout, m.cfg.PingAfter))
		return
	case s.pingAt != 0:
		next = s.pingAt + m.cfg.PongTimeout
	case now-heard >= m.cfg.PingAfter:
		m.pingN++
		data, _ := json.Marshal(wire.ClientFrame{Type: wire.TypePing, ID: "h-" + strconv.FormatUint(m.pingN, 10)})
		m.writeData(s, data)
		m.c.pings.Add(1)
		s.pingAt = now
		next = now + m.cfg.PongTimeout
	default:
		next = heard + m.cfg.PingAfter
	}
	if oldest, ok := m.oldestUnacked(s); ok {
		if now-oldest >= m.cfg.AckTimeout {
			m.c.ackTimeouts.Add(1)
			m.lost(fmt.Errorf("%w: a send was not acknowledged within %v", ErrAckTimeout, m.cfg.AckTimeout))
			return
		}
		next = min(next, oldest+m.cfg.AckTimeout)
	}
	m.beatOn = false
	m.beatAtMost(next)
}

// oldestUnacked is when the oldest send still waiting for its ack was
// written on s.
func (m *manager) oldestUnacked(s *sock) (time.Duration, bool) {
	var oldest time.Duration
	found := false
	for _, cl := range m.sends {
		if cl.on == s && !cl.retryWait && (!found || cl.wroteAt < oldest) {
			oldest, found = cl.wroteAt, true
		}
	}
	return oldest, found
}

// refuseTooBig answers the request that made the server close s with 1009
// with an error, so it is not written again. The server reads frames in
// order and the culprit is over its limit while those before it were
// not, so the largest request written on s and still unanswered is over
// the limit: refusing it is right even when it is not the culprit (that
// one then meets the same fate on the next socket). Its size is kept:
// no request that large is written again.
func (m *manager) refuseTooBig(s *sock) {
	var worst *call
	for _, cl := range m.pendingOn(s) {
		if worst == nil || len(cl.data) > len(worst.data) {
			worst = cl
		}
	}
	if worst == nil {
		m.c.log.Warn("tether: the server closed with 1009 (frame too large) but no request is waiting", "url", s.url)
		return
	}
	if m.tooBig == 0 || len(worst.data) < m.tooBig {
		m.tooBig = len(worst.data)
	}
	m.c.log.Warn("tether: request refused: the server closed with 1009 (frame too large)", "kind", worst.kind, "bytes", len(worst.data))
	m.drop(worst)
	m.answer(worst, result{err: fmt.Errorf("%w: the server closed the connection with 1009 (frame too large) on this %d-byte %s; it was not stored and is not sent again",
		ErrTooLarge, len(worst.data), worst.kind)})
}

// pendingOn lists the unanswered requests written on s.
func (m *manager) pendingOn(s *sock) []*call {
	var out []*call
	for _, cl := range m.sends {
		if cl.on == s && !cl.retryWait {
			out = append(out, cl)
		}
	}
	for _, cl := range m.calls {
		if cl.on == s {
			out = append(out, cl)
		}
	}
	return out
}

// drop removes cl from what is waiting for an answer.
func (m *manager) drop(cl *call) {
	if cl.kind == kindSend {
		delete(m.sends, cl.id)
		return
	}
	m.calls = slices.DeleteFunc(m.calls, func(x *call) bool { return x == cl })
}
