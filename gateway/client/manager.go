package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/wire"
)

// event is what a reader hands the manager: a decoded frame (nil for one
// that is ignored) or the error that ended its socket.
type event struct {
	s   *sock
	f   any
	err error
}

type dialResult struct {
	ws    *websocket.Conn
	url   string
	token string // the token the hello carried
	fresh bool   // it came from TokenFunc for this attempt
	err   error
}

type phase int

// maxLateHellos bounds how many given-up hellos are remembered, so that a
// client flapping for a long time cannot excuse a real takeover forever.
const maxLateHellos = 4

const (
	phaseHello  phase = iota // hello written, waiting for session
	phaseReplay              // resumed, waiting for the history_batch
	phaseReady
)

// sock is one open socket; its reader goroutine reads, the manager writes.
type sock struct {
	ws    *websocket.Conn
	url   string
	token string
	fresh bool
	phase phase
	stop  chan struct{} // closed by the manager: the reader must give up
	done  chan struct{} // closed by the reader on exit
	// heard is when the reader last got anything (since Client.epoch).
	heard atomic.Int64
	// pingAt is when the unanswered ping was written (since Client.epoch);
	// 0: none is out.
	pingAt time.Duration
	// Answers come back in request order, per frame type.
	histq   []*call // nil marks an internal fill page
	ctxq    []*call
	filling bool
	srvErr  *ServerError // the last error frame without an id
	werr    error        // a write failed: the socket is lost
}

func (s *sock) hear(epoch time.Time) { s.heard.Store(int64(time.Since(epoch))) }

var (
	errGap     = errors.New("client: gap in the message stream")
	errDropped = errors.New("client: dropped on purpose")
	errTimeout = errors.New("client: handshake timed out")
)

// manager is the connection-manager goroutine's state; nothing else
// touches it.
type manager struct {
	c   *Client
	cfg *Config

	sid        string
	last, high uint64 // newest seq queued for Messages; newest the server has
	queue      []wire.Message
	sends      map[string]*call
	calls      []*call // history, context, complete not yet answered
	n          uint64
	reply      *reply // the streamed reply in progress
	token      string // the last token a server accepted, reused while valid
	tooBig     int    // smallest frame the server closed 1009 on; 0: none

	sock       *sock
	attached   bool // a session was attached once
	urlIdx     int
	failures   int // consecutive failed attempts
	dialing    bool
	dialCh     chan dialResult
	dialCancel context.CancelFunc
	deadline   time.Time   // of the attempt in progress
	timer      *time.Timer // backoff while disconnected, handshake deadline while connecting
	timerOn    bool
	retry      *time.Timer // resend of rate_limited sends
	retryOn    bool
	retries    int
	beat       *time.Timer // heartbeat and ack deadlines of the attached socket
	beatOn     bool
	beatAt     time.Duration // when beat fires (since Client.epoch)
	pingN      uint64
	completed  bool // the server confirmed a complete
	ended      error
	// lateHellos counts resumes this client gave up on after their hello
	// was written: a server that was slow (paused, overloaded) may still
	// act on one and supersede the connection that replaced it. Each
	// such hello excuses one 4001 (PROTOCOL.md, "Handle every close
	// code"): the newer connection was this client's own.
	lateHellos int
}

func newManager(c *Client) *manager {
	m := &manager{
		c: c, cfg: &c.cfg, sid: c.cfg.SessionID, last: c.cfg.LastSeq, high: c.cfg.LastSeq,
		sends: make(map[string]*call), urlIdx: rand.IntN(len(c.cfg.URLs)), dialCh: make(chan dialResult, 1),
		timer: time.NewTimer(time.Hour), retry: time.NewTimer(time.Hour), beat: time.NewTimer(time.Hour),
	}
	m.timer.Stop()
	m.retry.Stop()
	m.beat.Stop()
	return m
}

func (m *manager) run() {
	defer close(m.c.exited)
	m.dial()
	for m.ended == nil {
		var out chan<- wire.Message
		var head wire.Message
		if len(m.queue) > 0 {
			out, head = m.c.msgs, m.queue[0]
		}
		var pout chan<- Partial
		p, offer := m.offerable()
		if offer {
			pout = m.c.parts
		}
		select {
		case r := <-m.c.reqs:
			m.request(r)
		case ev := <-m.c.events:
			m.event(ev)
		case d := <-m.dialCh:
			m.dialed(d)
		case <-m.timerC():
			m.timerOn = false
			m.timeout()
		case <-m.retryC():
			m.retryOn = false
			m.resendWaiting()
		case <-m.beatC():
			m.beatOn = false
			m.heartbeat()
		case out <- head:
			m.pop()
		case pout <- p:
			m.offered(p)
		case <-m.c.ctx.Done():
			m.end(ErrClosed)
		}
		if s := m.sock; s != nil && s.werr != nil {
			m.lost(s.werr)
		}
	}
	m.flush()
}

// flush hands what is still queued to Messages after the client ended
// (not after Close), then closes it.
func (m *manager) flush() {
	defer close(m.c.msgs)
	close(m.c.parts)
	for len(m.queue) > 0 && m.ended != ErrClosed {
		select {
		case m.c.msgs <- m.queue[0]:
			m.pop()
		case r := <-m.c.reqs:
			m.request(r)
		case <-m.c.ctx.Done():
			return
		}
	}
}

func (m *manager) timerC() <-chan time.Time {
	if m.timerOn {
		return m.timer.C
	}
	return nil
}

func (m *manager) retryC() <-chan time.Time {
	if m.retryOn {
		return m.retry.C
	}
	return nil
}

func (m *manager) arm(d time.Duration) {
	m.timer.Reset(d)
	m.timerOn = true
}

func (m *manager) disarm() {
	m.timer.Stop()
	m.timerOn = false
}

// backoff is the jittered wait after n consecutive failures: between half
// and all of MinBackoff·2ⁿ, capped at MaxBackoff.
func (m *manager) backoff(n int) time.Duration {
	d := m.cfg.MinBackoff << min(n, 30)
	if d <= 0 || d > m.cfg.MaxBackoff {
		d = m.cfg.MaxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

// dial starts one connection attempt on its own goroutine, so that the
// manager keeps serving calls meanwhile.
func (m *manager) dial() {
	a := attempt{url: m.cfg.URLs[m.urlIdx%len(m.cfg.URLs)], sid: m.sid, last: m.last, mark: m.streamMark()}
	if reusable(m.token, time.Now()) {
		a.token = m.token
	}
	m.deadline = time.Now().Add(m.cfg.HandshakeTimeout)
	ctx, cancel := context.WithDeadline(m.c.ctx, m.deadline)
	m.dialing, m.dialCancel = true, cancel
	go func() { m.dialCh <- m.c.dialOnce(ctx, a) }()
}

func (m *manager) dialed(d dialResult) {
	m.dialing = false
	m.dialCancel()
	if d.err != nil {
		if errors.Is(d.err, ErrUnauthorized) {
			m.end(d.err) // TokenFunc says no token will come
			return
		}
		m.failed(d.url, d.err)
		return
	}
	s := &sock{ws: d.ws, url: d.url, token: d.token, fresh: d.fresh, stop: make(chan struct{}), done: make(chan struct{})}
	s.hear(m.c.epoch)
	m.sock = s
	go m.c.read(s)
	m.arm(time.Until(m.deadline))
}

// timeout: the backoff is over, or the handshake took too long.
func (m *manager) timeout() {
	switch {
	case m.sock != nil:
		m.lost(errTimeout)
	case !m.dialing:
		m.dial()
	}
}

// failed counts a failed attempt and schedules the next one.
func (m *manager) failed(url string, err error) {
	m.failures++
	m.urlIdx++
	m.c.log.Warn("tether connect failed", "url", url, "attempt", m.failures, "err", err)
	if n := m.cfg.MaxAttempts; n > 0 && m.failures >= n {
		m.end(fmt.Errorf("%w: %d attempts, the last: %w", ErrUnreachable, m.failures, err))
		return
	}
	wait := m.backoff(m.failures)
	m.arm(wait)
	if m.cfg.OnRetry != nil {
		m.cfg.OnRetry(url, err, wait)
	}
}

// lost handles the end of the current socket: the client ends, or it
// reconnects and resumes.
func (m *manager) lost(err error) {
	s := m.sock
	t := terminal(err, s)
	if t != nil && m.refreshToken(s, t) {
		err, t = t, nil
	}
	if errors.Is(t, ErrSuperseded) && m.lateHellos > 0 {
		m.lateHellos--
		m.c.log.Info("tether superseded by a hello this client gave up on; resuming", "session", m.sid)
		t = nil
	}
	var ce *websocket.CloseError
	if s.phase == phaseHello && m.sid != "" && !errors.As(err, &ce) {
		m.lateHellos = min(m.lateHellos+1, maxLateHellos)
	}
	if s.phase == phaseReady {
		if m.cfg.OnDisconnect != nil {
			m.cfg.OnDisconnect(s.url, err)
		}
		if m.cfg.onLost != nil {
			m.cfg.onLost(err, m.completed || t != nil)
		}
	}
	switch {
	case m.completed:
		m.end(ErrCompleted) // nothing left to resume
		return
	case t != nil:
		m.end(t)
		return
	case isClose(err, wire.CloseTooBig):
		m.refuseTooBig(s)
	}
	wasReady := s.phase == phaseReady
	m.abandon(s, false)
	if !wasReady {
		m.failed(s.url, err)
		return
	}
	m.c.log.Info("tether connection lost; resuming", "url", s.url, "session", m.sid, "last_seq", m.last, "err", err)
	m.urlIdx++
	m.failures = 0
	m.arm(m.backoff(0))
}

// refreshToken decides whether a token refusal (t) is worth another
// attempt: it is when the refused token was one the client reused, not
// one TokenFunc just gave; the next attempt then asks TokenFunc.
func (m *manager) refreshToken(s *sock, t error) bool {
	if m.cfg.TokenFunc == nil || s.fresh || !(errors.Is(t, ErrUnauthorized) || errors.Is(t, ErrReauthRequired)) {
		return false
	}
	m.c.log.Info("tether token refused; asking for a fresh one", "session", m.sid, "err", t)
	m.token = ""
	return true
}

func isClose(err error, code int) bool {
	var ce *websocket.CloseError
	return errors.As(err, &ce) && ce.Code == code
}

// terminal says whether the socket's end ends the client, and with what.
func terminal(err error, s *sock) error {
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		return nil
	}
	var why error = ce
	if s.srvErr != nil {
		why = s.srvErr
	}
	switch ce.Code {
	case wire.CloseNormal:
		return ErrCompleted
	case wire.CloseSuperseded:
		return ErrSuperseded
	case wire.CloseReauth:
		return fmt.Errorf("%w (%w)", ErrReauthRequired, why)
	case wire.ClosePolicy:
		if s.srvErr != nil && s.srvErr.Code != wire.CodeUnauthorized {
			return s.srvErr
		}
		return fmt.Errorf("%w (%w)", ErrUnauthorized, why)
	case wire.CloseUnsupported, wire.CloseInvalidPayload:
		return fmt.Errorf("client: the server refused a frame: %w", why)
	}
	// 1006, 1009 (its send is refused, the rest go on), 1011, 1012, 1013
	// and the rest: reconnect.
	return nil
}

// abandon closes s and waits for its reader; graceful sends a 1000 close
// frame first.
func (m *manager) abandon(s *sock, graceful bool) {
	close(s.stop)
	if graceful {
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
		_ = s.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	}
	_ = s.ws.Close()
	<-s.done
	if m.sock == s {
		m.sock = nil
		m.disarm()
		m.stopBeat()
	}
}

// end stops talking to servers for good and answers everything pending.
func (m *manager) end(err error) {
	if m.ended != nil {
		return
	}
	m.ended = err
	m.c.end(err) // Err is set before any pending call learns it
	if s := m.sock; s != nil {
		m.abandon(s, true)
	}
	if m.dialing {
		m.dialCancel()
		if d := <-m.dialCh; d.ws != nil {
			_ = d.ws.Close()
		}
		m.dialing = false
	}
	m.disarm()
	m.retry.Stop()
	m.stopBeat()
	for id, cl := range m.sends {
		delete(m.sends, id)
		m.answer(cl, result{err: err})
	}
	for _, cl := range m.calls {
		res := result{err: err}
		if cl.kind == kindComplete && errors.Is(err, ErrCompleted) {
			res.err = nil
		}
		m.answer(cl, res)
	}
	m.calls = nil
	if err == ErrClosed {
		m.c.log.Debug("tether client closed", "session", m.sid)
	} else {
		m.c.log.Info("tether client ended", "session", m.sid, "err", err)
	}
}
