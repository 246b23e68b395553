package actor

import (
	"maps"
	"time"

	"github.com/tether-dev/tether/wal"
)

// Session is the pure state machine of one session: Step takes an event
// and returns the effects to carry out, in order. It does no I/O, starts
// no goroutine and reads no clock (events carry the time), so it is tested
// with plain tables. The actor goroutine (actor.go) runs the effects.
//
// The actor is fail-stop: if an effAppend fails, the actor stops without
// running the rest, and the state is rebuilt from the log next time.
type Session struct {
	cfg   sessionConfig
	meta  wal.Meta
	conn  Conn // the one attached connection, or nil
	busy  bool // an engine step or a tool run is in flight
	touch time.Time
}

type sessionConfig struct {
	Window       time.Duration
	IdleTimeout  time.Duration
	ReauthMaxAge time.Duration
	// Tool looks up a tool's declaration (idempotent, sensitive).
	Tool func(name string) (Tool, bool)
}

func newSession(cfg sessionConfig, m wal.Meta, now time.Time) *Session {
	return &Session{cfg: cfg, meta: m, touch: now}
}

// Events.
type (
	evStart  struct{ now time.Time }
	evAttach struct {
		conn     Conn
		userID   string
		lastSeq  uint64
		authTime time.Time
		// newReason is set for a session just created for this hello.
		newReason string
		now       time.Time
	}
	evDetach struct {
		conn Conn
		now  time.Time
	}
	evSend struct {
		conn     Conn
		id       string
		content  string
		metadata map[string]any
		// prevSeq is the seq this id already became, found in the log by
		// the actor before Step (0: a new send).
		prevSeq uint64
		now     time.Time
	}
	evContext struct {
		conn Conn
		set  map[string]any
		now  time.Time
	}
	evComplete struct {
		conn Conn
		now  time.Time
	}
	evHistory struct {
		conn   Conn
		before uint64
		limit  int
		now    time.Time
	}
	evAction struct {
		userSeq uint64
		action  Action
		err     error
		now     time.Time
	}
	evToolDone struct {
		callID string
		result string
		err    error
		now    time.Time
	}
	evToolProgress struct {
		callID  string
		partial string
		now     time.Time
	}
	evTick     struct{ now time.Time }
	evShutdown struct{}
)

// Effects.
type (
	effAppend struct {
		entries []wal.Entry
		sends   map[string]uint64
		meta    wal.Meta
	}
	effDeliver struct {
		conn Conn
		out  Out
	}
	effClose struct {
		conn   Conn
		code   int
		reason string
	}
	// effReplay sends the resume's history_batch: entries after after.
	effReplay struct {
		conn  Conn
		after uint64
		last  uint64
	}
	effHistory struct {
		conn   Conn
		before uint64
		limit  int
	}
	effStep    struct{ userSeq uint64 }
	effRunTool struct{ call wal.ToolCall }
	// effCancelTurn abandons the running step or tool.
	effCancelTurn struct{}
	// effOpened answers an attach: reason, or err for a refusal that
	// creates nothing (reauth, bad last_seq).
	effOpened struct {
		reason string
		err    error
	}
	effStop struct{}
)

// Effect is one of the eff* types.
type Effect any

// Step advances the machine by one event.
func (s *Session) Step(ev any) []Effect {
	switch ev := ev.(type) {
	case evStart:
		return s.start(ev.now)
	case evAttach:
		s.touch = ev.now
		return s.attach(ev)
	case evDetach:
		s.touch = ev.now
		return s.detach(ev)
	case evSend:
		s.touch = ev.now
		if ev.conn != s.conn {
			return nil
		}
		return s.send(ev)
	case evContext:
		s.touch = ev.now
		if ev.conn != s.conn {
			return nil
		}
		return s.setContext(ev)
	case evComplete:
		s.touch = ev.now
		if ev.conn != s.conn {
			return nil
		}
		return s.complete(ev.now)
	case evHistory:
		s.touch = ev.now
		if ev.conn != s.conn {
			return nil
		}
		return []Effect{effHistory{conn: ev.conn, before: ev.before, limit: ev.limit}}
	case evAction:
		return s.action(ev)
	case evToolDone:
		return s.toolDone(ev)
	case evToolProgress:
		return s.toolProgress(ev)
	case evTick:
		return s.tick(ev.now)
	case evShutdown:
		var effs []Effect
		if s.conn != nil {
			effs = append(effs, effClose{conn: s.conn, code: CloseRestarting, reason: "node shutting down"})
			s.conn = nil
		}
		return append(effs, effCancelTurn{}, effStop{})
	}
	return nil
}

// Deadline is when the actor next needs an evTick: the end of the
// reconnect window, or the moment it may passivate. Zero means never.
func (s *Session) Deadline() time.Time {
	var d time.Time
	if s.meta.Status == wal.StatusInterrupted && !s.meta.ExpiresAt.IsZero() {
		d = s.meta.ExpiresAt
	}
	if s.conn == nil && !s.busy && s.cfg.IdleTimeout > 0 {
		if idle := s.touch.Add(s.cfg.IdleTimeout); d.IsZero() || idle.Before(d) {
			d = idle
		}
	}
	return d
}

// Meta returns a copy of the session's metadata as the machine has it.
func (s *Session) Meta() wal.Meta { return s.meta }

func (s *Session) attach(ev evAttach) []Effect {
	m := &s.meta
	if ev.newReason == "" {
		switch {
		case m.UserID != ev.userID:
			// Identical to an unknown id, and nothing about the session
			// changes.
			return []Effect{effOpened{reason: ReasonNotFound}}
		case m.Status == wal.StatusCompleted:
			return []Effect{effOpened{reason: ReasonCompleted}}
		case m.Status == wal.StatusExpired:
			return []Effect{effOpened{reason: ReasonExpired}}
		case m.Status == wal.StatusInterrupted && !ev.now.Before(m.ExpiresAt):
			return append(s.expire(ev.now), effOpened{reason: ReasonExpired}, effStop{})
		case m.Sensitive && (ev.authTime.IsZero() || ev.now.Sub(ev.authTime) > s.cfg.ReauthMaxAge):
			return []Effect{effOpened{err: ErrReauthRequired}}
		case ev.lastSeq > m.LastSeq:
			return []Effect{effOpened{err: ErrBadLastSeq}}
		}
	}
	var effs []Effect
	if old := s.conn; old != nil && old != ev.conn {
		effs = append(effs, effClose{conn: old, code: CloseSuperseded, reason: "superseded by a newer connection"})
	}
	s.conn = ev.conn
	m.Status = wal.StatusActive
	m.InterruptedAt, m.ExpiresAt = time.Time{}, time.Time{}
	m.LastActiveAt = ev.now
	reason := ev.newReason
	if reason == "" {
		reason = ReasonResumed
	}
	effs = append(effs, s.appendMeta(), effOpened{reason: reason}, effDeliver{conn: ev.conn, out: s.sessionOut(reason)})
	if ev.newReason == "" {
		effs = append(effs, effReplay{conn: ev.conn, after: ev.lastSeq, last: m.LastSeq})
	}
	return effs
}

func (s *Session) sessionOut(reason string) *SessionOut {
	out := &SessionOut{
		SessionID: s.meta.SessionID,
		Resumed:   reason == ReasonResumed,
		Reason:    reason,
		Status:    s.meta.Status,
		LastSeq:   s.meta.LastSeq,
		Window:    s.cfg.Window,
		Context:   maps.Clone(s.meta.Context),
		Sensitive: s.meta.Sensitive,
	}
	if p := s.meta.Pending; p != nil {
		cp := *p
		out.Pending = &cp
	}
	return out
}

func (s *Session) detach(ev evDetach) []Effect {
	if ev.conn == nil || ev.conn != s.conn {
		return nil // a superseded connection going away changes nothing
	}
	s.conn = nil
	if s.meta.Status != wal.StatusActive {
		return nil
	}
	s.markInterrupted(ev.now)
	return []Effect{s.appendMeta()}
}

// markInterrupted starts the reconnect window now: it counts from the
// moment the server learned of the disconnect.
func (s *Session) markInterrupted(now time.Time) {
	s.meta.Status = wal.StatusInterrupted
	s.meta.InterruptedAt = now
	s.meta.ExpiresAt = now.Add(s.cfg.Window)
	s.meta.LastActiveAt = now
}

func (s *Session) setContext(ev evContext) []Effect {
	m := &s.meta
	if m.Context == nil {
		m.Context = make(map[string]any, len(ev.set))
	}
	for k, v := range ev.set {
		if v == nil {
			delete(m.Context, k)
		} else {
			m.Context[k] = v
		}
	}
	if v, ok := ev.set["sensitive"].(bool); ok && v {
		m.Sensitive = true
	}
	if m.Sensitive {
		m.Context["sensitive"] = true // nothing clears the mark
	}
	m.LastActiveAt = ev.now
	return []Effect{s.appendMeta(), effDeliver{conn: s.conn, out: &ContextOut{Context: maps.Clone(m.Context)}}}
}

func (s *Session) complete(now time.Time) []Effect {
	entries := s.abandonTurn("cancelled: session completed", now)
	s.meta.Status = wal.StatusCompleted
	s.meta.LastActiveAt = now
	conn := s.conn
	effs := s.deliver([]Effect{effCancelTurn{}, effAppend{entries: entries, meta: s.meta}}, entries...)
	s.conn = nil
	return append(effs,
		effDeliver{conn: conn, out: &CompletedOut{SessionID: s.meta.SessionID}},
		effClose{conn: conn, code: CloseNormal, reason: "session completed"},
		effStop{},
	)
}

// expire ends an interrupted session whose window has passed.
func (s *Session) expire(now time.Time) []Effect {
	entries := s.abandonTurn("cancelled: session expired", now)
	s.meta.Status = wal.StatusExpired
	return []Effect{effCancelTurn{}, effAppend{entries: entries, meta: s.meta}}
}

func (s *Session) tick(now time.Time) []Effect {
	m := &s.meta
	if m.Status == wal.StatusInterrupted && !now.Before(m.ExpiresAt) {
		return append(s.expire(now), effStop{})
	}
	if s.conn == nil && !s.busy && s.cfg.IdleTimeout > 0 && !now.Before(s.touch.Add(s.cfg.IdleTimeout)) {
		return []Effect{effStop{}}
	}
	return nil
}

func (s *Session) appendMeta() effAppend { return effAppend{meta: s.meta} }
