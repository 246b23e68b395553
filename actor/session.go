package actor

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal"
)

// Session is the pure state machine of one session: Step takes an event
// and returns the effects to carry out, in order. It does no I/O, starts
// no goroutine and reads no clock (Step is given the time), so it is
// tested with plain tables. The actor goroutine (actor.go) runs the
// effects.
//
// Durable before visible lives here: every effect emitted after a
// non-lazy append is held back until the journal reports that append done
// (evAppended), and the in-memory tail takes entries only then. So the
// actor may take the next event while appends are in flight, and no
// client ever sees what a crash could lose. A failed append is fail-stop:
// what is held is dropped and the actor stops; the next activation
// rebuilds the session from the log.
type Session struct {
	cfg sessionConfig
	hdr wal.Header // ahead of the log while appends are in flight
	st  state
	ctx contexts
	// conns are the attached connections, oldest first: one, or up to
	// MaxConns that attached shared (PROTOCOL.md, attach "shared").
	conns []Conn
	busy  bool // an engine step or a tool run is in flight
	// touch is the last client activity, for passivation.
	touch time.Time

	tail  tail
	sends sendIndex
	// The engine step in flight (its id), the reply it is streaming, and
	// the text of that step a split already logged.
	step     uint64
	reply    *streamed
	stepText string
	// Appends: ids are consecutive; barrier is the newest non-lazy one,
	// completed the newest the journal finished.
	nextID, barrier, completed uint64
	unstable                   []unstableAppend
	held                       []heldEffect
	stateBytes                 []byte
	stateDirty, contextDirty   bool
	failed                     bool

	out []Effect // of the Step in progress
}

type unstableAppend struct {
	id      uint64
	entries []wal.Entry
}

type heldEffect struct {
	waitFor uint64
	eff     Effect
}

type sessionConfig struct {
	Window, IdleTimeout, ReauthMaxAge time.Duration
	// MaxTurns caps the user messages waiting for the agent.
	MaxTurns int
	// MaxConns caps the connections attached shared.
	MaxConns int
	// MaxContextBytes caps the user context (wal.ValueSize).
	MaxContextBytes int
	// TailEntries and TailBytes bound the in-memory tail.
	TailEntries, TailBytes int
	// FlushInterval coalesces the parts of a streamed reply: after a delta
	// goes out, parts wait this long to go out together (0: each at once).
	FlushInterval time.Duration
	// Tool looks up a tool's declaration (idempotent, sensitive).
	Tool func(name string) (engine.Tool, bool)
	// Instant, when set, is the reply of an Instant engine: a send is
	// answered in the same append.
	Instant func(user wal.Entry) string
}

// newSession makes the machine of an activated session from what the log
// holds: its data and its newest entries (oldest first). olderSends are
// the send ids of entries older than those (loaded only when there are).
func newSession(cfg sessionConfig, d wal.SessionData, st state, cx contexts, newest []wal.Entry, now time.Time) *Session {
	s := &Session{cfg: cfg, hdr: d.Header, st: st, ctx: cx, touch: now}
	s.stateBytes = d.Header.State
	s.tail = newTail(cfg.TailEntries, cfg.TailBytes, s.evicted)
	s.tail.add(newest...)
	for i := range s.tail.len() {
		e := s.tail.at(i)
		if id, ok := sendIDOf(*e); ok {
			s.sends.add(id, e.Seq)
		}
	}
	return s
}

// evicted retires the send id of an entry leaving the tail.
func (s *Session) evicted(e wal.Entry) { s.sends.retireThrough(e.Seq) }

func sendIDOf(e wal.Entry) (string, bool) {
	if e.Role != engine.RoleUser {
		return "", false
	}
	id, ok := e.Metadata["id"].(string)
	return id, ok
}

// Step advances the machine by one event that happened at now.
func (s *Session) Step(now time.Time, ev Event) []Effect {
	s.out = nil
	if s.failed {
		return nil
	}
	switch ev := ev.(type) {
	case evStart:
		s.start(now)
	case evAttach:
		s.touch = now
		s.attach(ev, now)
	case evDetach:
		s.touch = now
		s.detach(ev, now)
	case evSend:
		s.touch = now
		if s.attached(ev.conn) {
			s.send(ev, now)
		}
	case evSendChecked:
		if s.attached(ev.send.conn) {
			s.sendChecked(ev, now)
		}
	case evContext:
		s.touch = now
		if s.attached(ev.conn) {
			s.setContext(ev, now)
		}
	case evComplete:
		s.touch = now
		if s.attached(ev.conn) {
			s.complete(now)
		}
	case evHistory:
		s.touch = now
		if s.attached(ev.conn) {
			s.emit(effHistory(ev))
		}
	case evAction:
		s.action(ev, now)
	case evPart:
		s.part(ev)
	case evFlush:
		s.flush()
	case evToolDone:
		s.toolDone(ev, now)
	case evToolProgress:
		s.toolProgress(ev, now)
	case evCancel:
		s.touch = now
		if s.attached(ev.conn) {
			s.cancel(ev.replyTo, now)
		}
	case evApprove:
		s.touch = now
		if s.attached(ev.conn) {
			s.approve(ev, now)
		}
	case evAppended:
		s.appended(ev)
	case evTick:
		s.tick(now)
	case evShutdown:
		s.now(effCancelTurn{})
		s.reply = nil // not durable: the turn runs again on the next activation
		s.closeAll(CloseShutdown, "node shutting down")
		s.emit(effStop{})
	default:
		s.fail(fmt.Errorf("actor: unknown event %T", ev))
	}
	return s.takeOut()
}

// takeOut hands the effects over and keeps nothing of them: an idle
// session must not hold on to what it last delivered.
func (s *Session) takeOut() []Effect {
	out := s.out
	s.out = nil
	return out
}

// emit queues an effect behind the newest non-lazy append in flight.
func (s *Session) emit(e Effect) {
	if s.barrier > s.completed {
		if s.held == nil {
			s.held = make([]heldEffect, 0, effectsCap)
		}
		s.held = append(s.held, heldEffect{waitFor: s.barrier, eff: e})
		return
	}
	s.now(e)
}

// now queues an effect that does not depend on durability.
func (s *Session) now(e Effect) {
	if s.out == nil {
		s.out = make([]Effect, 0, effectsCap)
	}
	s.out = append(s.out, e)
}

// effectsCap is room for what a send makes (an append, then the ack and
// the entries it delivers) in one allocation rather than three.
const effectsCap = 4

// deliver emits the delivery of out to every attached connection: what
// the log and the reply show is the same for all of them.
func (s *Session) deliver(out Out) {
	for _, c := range s.conns {
		s.emit(effDeliver{conn: c, out: out})
	}
}

// deliverTo emits the delivery of out to one connection: the answer to
// its own request (an ack, an error, its session frame).
func (s *Session) deliverTo(c Conn, out Out) {
	if c != nil {
		s.emit(effDeliver{conn: c, out: out})
	}
}

// attached reports whether c is one of the session's connections.
func (s *Session) attached(c Conn) bool {
	return c != nil && slices.Contains(s.conns, c)
}

// closeAll emits the close of every attached connection, which are then
// no longer attached.
func (s *Session) closeAll(why CloseReason, msg string) {
	for _, c := range s.conns {
		s.emit(effClose{conn: c, why: why, msg: msg})
	}
	s.conns = nil
}

// DropConns detaches every connection at once and returns them, for the
// runner to close when it stops the actor without a Step (a storage
// failure, a fence).
func (s *Session) DropConns() []Conn {
	c := s.conns
	s.conns = nil
	return c
}

func (s *Session) fail(err error) {
	s.failed = true
	s.held = nil
	s.now(effFail{err: err})
}

// appendBatch emits an append of entries (and sends) with the header and
// state as they are now, and the context if it changed.
func (s *Session) appendBatch(entries []wal.Entry, sends []wal.Send, lazy bool) {
	// A lazy batch that carries nothing but the header's status and times
	// needs no fsync of its own: a crash that loses it leaves the session
	// interrupted, which a client resumes the same way.
	noSync := lazy && len(entries) == 0 && len(sends) == 0 && !s.stateDirty && !s.contextDirty
	if s.stateDirty {
		b, err := encodeState(s.st)
		if err != nil {
			s.fail(err)
			return
		}
		s.stateBytes, s.stateDirty = b, false
	}
	s.hdr.State = s.stateBytes
	b := &wal.Batch{SessionID: s.hdr.SessionID, Epoch: s.hdr.Epoch, Entries: entries, Sends: sends, Header: s.hdr, NoSync: noSync}
	if s.contextDirty {
		c, err := encodeContexts(s.ctx)
		if err != nil {
			s.fail(err)
			return
		}
		b.Context, s.contextDirty = c, false
	}
	s.nextID++
	id := s.nextID
	s.now(effAppend{id: id, batch: b, lazy: lazy})
	if len(entries) > 0 {
		s.unstable = append(s.unstable, unstableAppend{id: id, entries: entries})
	}
	if !lazy {
		s.barrier = id
	}
}

// appended takes the journal's answer for append ev.id: the entries are
// durable, enter the tail, and what waited for them is released.
func (s *Session) appended(ev evAppended) {
	if ev.err != nil {
		s.fail(fmt.Errorf("append: %w", ev.err))
		return
	}
	s.completed = max(s.completed, ev.id)
	n := 0
	for _, u := range s.unstable {
		if u.id > s.completed {
			break
		}
		s.tail.add(u.entries...)
		n++
	}
	s.unstable = s.unstable[n:]
	if len(s.unstable) == 0 {
		s.unstable = nil
	}
	n = 0
	for _, h := range s.held {
		if h.waitFor > s.completed {
			break
		}
		s.now(h.eff)
		n++
	}
	s.held = s.held[n:]
	if len(s.held) == 0 {
		s.held = nil
	}
}

// idle reports whether nothing is in flight: no turn, no append.
func (s *Session) idle() bool {
	return (!s.busy || s.awaiting()) && s.completed == s.nextID
}

// Deadline is when the actor next needs an evTick: the end of the
// reconnect window, or the moment it may passivate. Zero means never.
func (s *Session) Deadline() time.Time {
	var d time.Time
	if s.hdr.Status == wal.StatusInterrupted && !s.hdr.ExpiresAt.IsZero() {
		d = s.hdr.ExpiresAt
	}
	if len(s.conns) == 0 && s.idle() && s.cfg.IdleTimeout > 0 {
		if idle := s.touch.Add(s.cfg.IdleTimeout); d.IsZero() || idle.Before(d) {
			d = idle
		}
	}
	return d
}

// Header returns the session's header as the machine has it.
func (s *Session) Header() wal.Header { return s.hdr }

// durableSeq is the newest seq known durable.
func (s *Session) durableSeq() uint64 {
	if len(s.unstable) > 0 {
		return s.unstable[0].entries[0].Seq - 1
	}
	return s.hdr.LastSeq
}

func (s *Session) attach(ev evAttach, now time.Time) {
	h := &s.hdr
	if ev.newReason == "" {
		refuse := func(res opened) { s.now(effOpened{reply: ev.reply, res: res}) }
		switch {
		case h.UserID != ev.userID:
			// Identical to an unknown id; nothing about the session changes.
			refuse(opened{err: &NotResumedError{Reason: ReasonNotFound}})
			return
		case h.Status == wal.StatusCompleted:
			refuse(opened{err: &NotResumedError{Reason: ReasonCompleted}})
			return
		case h.Status == wal.StatusExpired:
			refuse(opened{err: &NotResumedError{Reason: ReasonExpired}})
			return
		case h.Status == wal.StatusInterrupted && !now.Before(h.ExpiresAt):
			s.expire(now)
			refuse(opened{err: &NotResumedError{Reason: ReasonExpired}})
			s.emit(effStop{})
			return
		}
		if err := MayReveal(*h, ev.authTime, now, s.cfg.ReauthMaxAge); err != nil {
			refuse(opened{err: err})
			return
		}
		if ev.lastSeq > h.LastSeq {
			refuse(opened{err: ErrBadLastSeq})
			return
		}
	}
	switch {
	case s.attached(ev.conn):
	case ev.shared && len(s.conns) >= s.cfg.MaxConns:
		s.now(effOpened{reply: ev.reply, res: opened{err: ErrTooManyConns}})
		return
	case ev.shared:
		s.conns = append(s.conns, ev.conn)
	default:
		for _, old := range s.conns {
			s.emit(effClose{conn: old, why: CloseSuperseded, msg: "superseded by a newer connection"})
		}
		s.conns = append(s.conns[:0], ev.conn)
	}
	reason := ev.newReason
	if reason == "" {
		reason = ReasonResumed
		// Nothing the client is shown depends on this being durable: a
		// crash leaves the session interrupted, which resumes the same.
		h.Status, h.InterruptedAt, h.ExpiresAt, h.LastActiveAt = wal.StatusActive, time.Time{}, time.Time{}, now
		s.appendBatch(nil, nil, true)
	}
	s.deliverTo(ev.conn, s.sessionOut(reason))
	if reason == ReasonResumed {
		s.emit(effReplay{conn: ev.conn, after: ev.lastSeq, last: h.LastSeq})
	}
	s.catchUp(ev.conn, ev.stream)
	s.emit(effOpened{reply: ev.reply, res: opened{reason: reason}})
}

func (s *Session) sessionOut(reason string) *SessionOut {
	out := &SessionOut{
		SessionID: s.hdr.SessionID,
		Resumed:   reason == ReasonResumed,
		Reason:    reason,
		Status:    s.hdr.Status,
		LastSeq:   s.hdr.LastSeq,
		Window:    s.cfg.Window,
		Context:   maps.Clone(s.ctx.User),
		Sensitive: s.hdr.Sensitive,
	}
	if p := s.st.Pending; p != nil {
		cp := *p
		out.Pending = &cp
	}
	return out
}

func (s *Session) detach(ev evDetach, now time.Time) {
	i := slices.Index(s.conns, ev.conn)
	if ev.conn == nil || i < 0 {
		return // a superseded connection going away changes nothing
	}
	s.conns = slices.Delete(s.conns, i, i+1)
	if len(s.conns) == 0 {
		s.conns = nil
	}
	if len(s.conns) > 0 || s.hdr.Status != wal.StatusActive {
		return
	}
	s.markInterrupted(now)
	s.appendBatch(nil, nil, true)
}

// markInterrupted starts the reconnect window now: it counts from the
// moment the server learned of the disconnect.
func (s *Session) markInterrupted(now time.Time) {
	s.hdr.Status = wal.StatusInterrupted
	s.hdr.InterruptedAt = now
	s.hdr.ExpiresAt = now.Add(s.cfg.Window)
	s.hdr.LastActiveAt = now
}

func (s *Session) setContext(ev evContext, now time.Time) {
	merged := maps.Clone(s.ctx.User)
	if merged == nil {
		merged = make(map[string]any, len(ev.set))
	}
	for k, v := range ev.set {
		if v == nil {
			delete(merged, k)
		} else {
			merged[k] = v
		}
	}
	sensitive := s.hdr.Sensitive
	if v, ok := ev.set["sensitive"].(bool); ok && v {
		sensitive = true
	}
	if sensitive {
		merged["sensitive"] = true // nothing clears the mark
	}
	if n := wal.ValueSize(merged); n > s.cfg.MaxContextBytes {
		s.deliverTo(ev.conn, &ErrorOut{Code: CodeTooLarge, Message: fmt.Sprintf(
			"the context would be %d bytes, the limit is %d; nothing was changed", n, s.cfg.MaxContextBytes)})
		return
	}
	s.ctx.User, s.hdr.Sensitive, s.contextDirty = merged, sensitive, true
	s.hdr.LastActiveAt = now
	s.appendBatch(nil, nil, false)
	s.deliverTo(ev.conn, &ContextOut{Context: maps.Clone(merged)})
}

func (s *Session) complete(now time.Time) {
	s.now(effCancelTurn{})
	entries := s.abandonTurn("cancelled: session completed", now)
	s.hdr.Status = wal.StatusCompleted
	s.hdr.LastActiveAt = now
	s.appendBatch(entries, nil, false)
	for _, e := range entries {
		s.deliver(&EntryOut{Entry: e})
	}
	s.deliver(&CompletedOut{SessionID: s.hdr.SessionID})
	s.closeAll(CloseCompleted, "session completed")
	s.emit(effStatus{userID: s.hdr.UserID, status: wal.StatusCompleted})
	s.emit(effStop{})
}

// expire ends an interrupted session whose window has passed.
func (s *Session) expire(now time.Time) {
	s.now(effCancelTurn{})
	entries := s.abandonTurn("cancelled: session expired", now)
	s.hdr.Status = wal.StatusExpired
	s.appendBatch(entries, nil, false)
	s.emit(effStatus{userID: s.hdr.UserID, status: wal.StatusExpired})
}

func (s *Session) tick(now time.Time) {
	h := &s.hdr
	if h.Status == wal.StatusInterrupted && !now.Before(h.ExpiresAt) {
		s.expire(now)
		s.emit(effStop{})
		return
	}
	if len(s.conns) == 0 && s.idle() && len(s.held) == 0 && s.cfg.IdleTimeout > 0 && !now.Before(s.touch.Add(s.cfg.IdleTimeout)) {
		s.now(effStop{}) // passivate: everything is in the log
	}
}
