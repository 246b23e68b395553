package client

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/wire"
)

// kind is what a call asks the server.
type kind int

const (
	kindSend kind = iota
	kindHistory
	kindContext
	kindComplete
	kindCancel
	kindApprove
)

func (k kind) String() string {
	return [...]string{"send", "history", "context", "complete", "cancel", "approve"}[k]
}

// unanswered says the server sends nothing back for a frame of kind k
// (cancel, approve): the call is done once the frame is written.
func (k kind) unanswered() bool { return k == kindCancel || k == kindApprove }

// call is one API request waiting for its answer. Only the manager
// touches it after it is submitted.
type call struct {
	kind  kind
	id    string      // of a send
	data  []byte      // the encoded frame
	reply chan result // capacity 1
	n     uint64      // submission order, kept when calls are written again
	// also are later sends of the same id, answered together.
	also      []*call
	sends     int           // times written
	on        *sock         // the socket it was last written on
	wroteAt   time.Duration // when (since Client.epoch)
	retryWait bool          // rate_limited: waiting for the retry timer
	done      bool          // answered or cancelled
}

// newCall encodes f on the caller's goroutine, so that a value JSON
// cannot encode fails that call alone.
func newCall(k kind, f wire.ClientFrame) (*call, error) {
	data, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("client: encode %s: %w", f.Type, err)
	}
	return &call{kind: k, id: f.ID, data: data}, nil
}

type result struct {
	seq     uint64
	batch   wire.HistoryBatch
	context map[string]any
	err     error
}

// request is what the API hands the manager.
type request struct {
	call    *call
	cancel  *call
	drop    bool
	lastSeq chan<- uint64 // capacity 1
}

func (m *manager) request(r request) {
	switch {
	case r.lastSeq != nil:
		// Answered here, so that an entry already received from Messages
		// (its pop ran before this request was taken) is counted.
		r.lastSeq <- m.c.delivered.Load()
	case m.ended != nil:
		if r.call != nil {
			m.answer(r.call, result{err: m.ended})
		}
	case r.drop:
		if m.sock != nil {
			m.lost(errDropped)
		}
	case r.cancel != nil:
		m.forget(r.cancel)
	case r.call != nil:
		m.submit(r.call)
	}
}

func (m *manager) submit(cl *call) {
	if m.tooBig > 0 && len(cl.data) >= m.tooBig {
		m.answer(cl, result{err: fmt.Errorf("%w: the %s frame is %d bytes, over the server's frame limit (it closed with 1009 on a %d-byte frame)",
			ErrTooLarge, cl.kind, len(cl.data), m.tooBig)})
		return
	}
	m.n++
	cl.n = m.n
	if cl.kind == kindSend {
		if first := m.sends[cl.id]; first != nil {
			first.also = append(first.also, cl) // one frame, one answer for both
			return
		}
		m.sends[cl.id] = cl
	} else {
		m.calls = append(m.calls, cl)
	}
	if s := m.sock; s != nil && s.phase == phaseReady {
		m.write(s, cl)
	}
}

// forget drops a call whose caller stopped waiting. A send stays pending
// while another caller waits for the same id.
func (m *manager) forget(cl *call) {
	cl.done = true
	if cl.kind != kindSend {
		m.calls = slices.DeleteFunc(m.calls, func(x *call) bool { return x == cl })
		return
	}
	for id, first := range m.sends {
		if first != cl && !slices.Contains(first.also, cl) {
			continue
		}
		if !first.done || slices.ContainsFunc(first.also, func(x *call) bool { return !x.done }) {
			return
		}
		delete(m.sends, id)
		return
	}
}

// answer gives res to cl and to every caller waiting with it.
func (m *manager) answer(cl *call, res result) {
	for _, x := range append([]*call{cl}, cl.also...) {
		if !x.done {
			x.done = true
			x.reply <- res
		}
	}
}

// write puts cl on s, noting where its answer will come from.
func (m *manager) write(s *sock, cl *call) {
	cl.on, cl.wroteAt = s, m.now()
	switch cl.kind {
	case kindSend:
		cl.sends++
		cl.retryWait = false
		if cl.sends > 1 {
			m.c.resends.Add(1)
		}
		m.beatAtMost(cl.wroteAt + m.cfg.AckTimeout)
	case kindHistory:
		s.histq = append(s.histq, cl)
	case kindContext:
		s.ctxq = append(s.ctxq, cl)
	}
	m.writeData(s, cl.data)
	if cl.kind.unanswered() && s.werr == nil {
		// Written is done: the server answers these with nothing but
		// the entries they cause. Never written again.
		m.calls = slices.DeleteFunc(m.calls, func(x *call) bool { return x == cl })
		m.answer(cl, result{})
	}
}

func (m *manager) writeData(s *sock, data []byte) {
	if s.werr != nil {
		return
	}
	_ = s.ws.SetWriteDeadline(time.Now().Add(m.cfg.WriteTimeout))
	s.werr = s.ws.WriteMessage(websocket.TextMessage, data)
}

// attach makes s the live socket once its session (and, on a resume, its
// history_batch) is in: everything unanswered is written again, in the
// order it was asked, with the same send ids.
func (m *manager) attach(s *sock) {
	s.phase = phaseReady
	m.disarm()
	m.failures = 0
	m.token = s.token
	if m.attached {
		m.c.reconnects.Add(1)
	}
	m.attached = true
	m.c.readyOnce.Do(func() { close(m.c.ready) })
	if m.cfg.OnConnect != nil {
		m.cfg.OnConnect(s.url)
	}
	m.heartbeat()
	pending := make([]*call, 0, len(m.sends)+len(m.calls))
	for _, cl := range m.sends {
		pending = append(pending, cl)
	}
	pending = append(pending, m.calls...)
	slices.SortFunc(pending, func(a, b *call) int { return cmp.Compare(a.n, b.n) })
	for _, cl := range pending {
		m.write(s, cl)
	}
	m.fillMore()
}

// resendWaiting writes the rate_limited sends again.
func (m *manager) resendWaiting() {
	s := m.sock
	if s == nil || s.phase != phaseReady {
		return // attach writes them
	}
	var waiting []*call
	for _, cl := range m.sends {
		if cl.retryWait {
			waiting = append(waiting, cl)
		}
	}
	slices.SortFunc(waiting, func(a, b *call) int { return cmp.Compare(a.n, b.n) })
	for _, cl := range waiting {
		m.write(s, cl)
	}
}
