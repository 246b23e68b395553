package machine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal/record"
)

// Machine is the pure state machine of one session: Step takes an event
// and returns the effects to carry out, in order. It does no I/O, starts
// no goroutine and reads no clock (Step is given the time), so it is
// tested with plain tables. The runner (package actor) carries out the
// effects.
//
// Durable before visible lives here: every effect emitted after a
// non-lazy append is held back until the journal reports that append done
// (Appended), and the in-memory tail takes entries only then. So the
// actor may take the next event while appends are in flight, and no
// client ever sees what a crash could lose. A failed append is fail-stop:
// what is held is dropped and the actor stops; the next activation
// rebuilds the session from the log.
type Machine struct {
	cfg Config
	hdr record.Header // ahead of the log while appends are in flight
	st  state
	ctx contexts
	// conns are the attached connections, oldest first: one, or up to
	// MaxConns that attached shared (PROTOCOL.md, attach "shared").
	conns []Conn
	busy  bool // an engine step or a tool run is in flight
	// touch is the last client activity, for passivation; quiet the
	// last event of any kind but a Tick or a Query, for hibernation.
	touch, quiet time.Time

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
	entries []record.Entry
}

type heldEffect struct {
	waitFor uint64
	eff     Effect
}

type Config struct {
	Window, IdleTimeout, ReauthMaxAge time.Duration
	// HibernateAfter lets a session whose clients are attached but quiet
	// leave memory after this long (hibernate.go); 0 never.
	HibernateAfter time.Duration
	// MaxTurns caps the user messages waiting for the agent.
	MaxTurns int
	// MaxConns caps the connections attached shared.
	MaxConns int
	// MaxContextBytes caps the user context (record.ValueSize).
	MaxContextBytes int
	// ReplayLimit caps the entries of a resume's history_batch and of a
	// snapshot. Default (0) DefaultReplayLimit.
	ReplayLimit int
	// TailEntries and TailBytes bound the in-memory tail.
	TailEntries, TailBytes int
	// FlushInterval coalesces the parts of a streamed reply: after a delta
	// goes out, parts wait this long to go out together (0: each at once).
	FlushInterval time.Duration
	// Tool looks up a tool's declaration (idempotent, sensitive).
	Tool func(name string) (engine.Tool, bool)
	// Instant, when set, is the reply of an Instant engine: a send is
	// answered in the same append.
	Instant func(user record.Entry) string
}

// Restore is what the log holds of a session, for New: its data, its
// newest entries (oldest first; the tail keeps what fits), and the send
// ids of the entries older than those (read only when there are any).
type Restore struct {
	Data       record.SessionData
	Newest     []record.Entry
	OlderSends []string
}

// New makes the machine of a session from what the log holds of it, at
// now. Stored state or context that cannot be decoded is started afresh
// and reported in Damage; the next append rewrites it.
func New(cfg Config, r Restore, now time.Time) (*Machine, Damage) {
	if cfg.ReplayLimit <= 0 {
		cfg.ReplayLimit = DefaultReplayLimit
	}
	d := r.Data
	st, serr := decodeState(d.Header.State)
	cx, cerr := decodeContexts(d.Context)
	s := &Machine{cfg: cfg, hdr: d.Header, st: st, ctx: cx, touch: now, quiet: now}
	s.stateBytes = d.Header.State
	s.stateDirty, s.contextDirty = serr != nil, cerr != nil
	for _, id := range r.OlderSends {
		s.sends.addOlder(id)
	}
	s.tail = newTail(cfg.TailEntries, cfg.TailBytes, s.evicted)
	for _, e := range r.Newest {
		// The id first: an entry the tail has no room for retires it.
		if id, ok := sendIDOf(e); ok {
			s.sends.add(id, e.Seq)
		}
		s.tail.add(e)
	}
	return s, Damage{State: serr, Context: cerr}
}

// evicted retires the send id of an entry leaving the tail.
func (s *Machine) evicted(e record.Entry) { s.sends.retireThrough(e.Seq) }

func sendIDOf(e record.Entry) (string, bool) {
	if e.Role != engine.RoleUser {
		return "", false
	}
	id, ok := e.Metadata[engine.MetaID].(string)
	return id, ok
}

// Step advances the machine by one event that happened at now.
func (s *Machine) Step(now time.Time, ev Event) []Effect {
	s.out = nil
	if s.failed {
		return nil
	}
	switch ev.(type) {
	case Tick, Query:
	default:
		s.quiet = now
	}
	switch ev := ev.(type) {
	case Start:
		s.start(now)
	case Attach:
		s.touch = now
		s.attach(ev, now)
	case Detach:
		s.touch = now
		s.detach(ev, now)
	case Send:
		s.touch = now
		if s.attached(ev.Conn) {
			s.send(ev, now)
		}
	case SendChecked:
		if s.attached(ev.Send.Conn) {
			s.sendChecked(ev, now)
		}
	case SetContext:
		s.touch = now
		if s.attached(ev.Conn) {
			s.setContext(ev, now)
		}
	case Complete:
		s.touch = now
		if s.attached(ev.Conn) {
			s.complete(now)
		}
	case HistoryRequest:
		s.touch = now
		if s.attached(ev.Conn) {
			s.emit(History{Conn: ev.Conn, Before: ev.Before, Limit: ev.Limit})
		}
	case Query:
		s.now(Report{Reply: ev.Reply})
	case Recover:
		s.recover(ev.Boot, ev.LastAlive)
	case StepDone:
		s.action(ev, now)
	case Part:
		s.part(ev)
	case Flush:
		s.flush()
	case ToolDone:
		s.toolDone(ev, now)
	case ToolProgress:
		s.toolProgress(ev, now)
	case Cancel:
		s.touch = now
		if s.attached(ev.Conn) {
			s.cancel(ev.ReplyTo, now)
		}
	case Approve:
		s.touch = now
		if s.attached(ev.Conn) {
			s.approve(ev, now)
		}
	case Appended:
		s.appended(ev)
	case Tick:
		s.tick(now)
	case Rejoin:
		s.rejoin(ev)
	case Shutdown:
		s.now(CancelTurn{})
		s.reply = nil // not durable: the turn runs again on the next activation
		s.closeAll(CloseShutdown, "node shutting down")
		s.emit(Stop{})
	default:
		s.fail(fmt.Errorf("actor: unknown event %T", ev))
	}
	return s.takeOut()
}

// takeOut hands the effects over and keeps nothing of them: an idle
// session must not hold on to what it last delivered.
func (s *Machine) takeOut() []Effect {
	out := s.out
	s.out = nil
	return out
}

// emit queues an effect behind the newest non-lazy append in flight.
func (s *Machine) emit(e Effect) {
	if s.barrier > s.completed {
		if s.held == nil {
			s.held = make([]heldEffect, 0, effectsCap)
		}
		s.held = append(s.held, heldEffect{waitFor: s.barrier, eff: e})
		return
	}
	s.now(e)
}

// now queues an effect that does not depend on durability, or one held
// until now: its spans are filled as the log stands at this moment.
func (s *Machine) now(e Effect) {
	if s.out == nil {
		s.out = make([]Effect, 0, effectsCap)
	}
	s.out = append(s.out, s.fill(e))
}

// effectsCap is room for what a send makes (an append, then the ack and
// the entries it delivers) in one allocation rather than three.
const effectsCap = 4

// deliver emits the delivery of out to every attached connection: what
// the log and the reply show is the same for all of them.
func (s *Machine) deliver(out Out) {
	for _, c := range s.conns {
		s.emit(Deliver{Conn: c, Out: out})
	}
}

// deliverTo emits the delivery of out to one connection: the answer to
// its own request (an ack, an error, its session frame).
func (s *Machine) deliverTo(c Conn, out Out) {
	if c != nil {
		s.emit(Deliver{Conn: c, Out: out})
	}
}

// attached reports whether c is one of the session's connections.
func (s *Machine) attached(c Conn) bool {
	return c != nil && slices.Contains(s.conns, c)
}

// closeAll emits the close of every attached connection, which are then
// no longer attached.
func (s *Machine) closeAll(why CloseReason, msg string) {
	for _, c := range s.conns {
		s.emit(CloseConn{Conn: c, Why: why, Msg: msg})
	}
	s.conns = nil
}

// fail stops the machine for good after a storage failure: its memory
// may be ahead of the log, so nothing more is shown; the next activation
// rebuilds the session from the log. Attached clients are told why and
// closed: the session moved (another node fenced this one: reconnect,
// 1012), cannot be stored now (retry, 1013), or failed (1011).
func (s *Machine) fail(err error) {
	s.failed = true
	// A close held behind an append (a shutdown, a completion) is owed to
	// a client no longer in conns: dropped with the rest of held, it
	// would leave that client waiting on a session nobody serves. Those
	// clients are closed as the failure says, as the attached ones are.
	conns := slices.Clone(s.conns)
	for _, h := range s.held {
		if cc, ok := h.eff.(CloseConn); ok && cc.Conn != nil && !slices.Contains(conns, cc.Conn) {
			conns = append(conns, cc.Conn)
		}
	}
	s.held = nil
	moved := errors.Is(err, record.ErrStaleEpoch) || errors.Is(err, record.ErrNotClaimed)
	for _, c := range conns {
		switch {
		case moved:
			s.now(CloseConn{Conn: c, Why: CloseShutdown, Msg: "the session moved to another node; reconnect"})
		case errors.Is(err, ErrUnavailable):
			s.now(Deliver{Conn: c, Out: &ErrorOut{Code: CodeUnavailable, Message: "the session cannot be stored on its replicas now; retry"}})
			s.now(CloseConn{Conn: c, Why: CloseUnavailable, Msg: "try again later"})
		default:
			s.now(Deliver{Conn: c, Out: &ErrorOut{Code: CodeInternal, Message: "session storage failed; reconnect to resume"}})
			s.now(CloseConn{Conn: c, Why: CloseInternal, Msg: "internal error"})
		}
	}
	s.now(Fail{Err: err, Moved: moved, Interrupt: !moved && len(conns) > 0})
	s.conns = nil
}

// appendBatch emits an append of entries (and sends) with the header and
// state as they are now, and the context if it changed.
func (s *Machine) appendBatch(entries []record.Entry, sends []record.Send, lazy bool) {
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
	b := &record.Batch{SessionID: s.hdr.SessionID, Epoch: s.hdr.Epoch, Entries: entries, Sends: sends, Header: s.hdr, NoSync: noSync}
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
	s.now(Append{ID: id, Batch: b, Lazy: lazy})
	if len(entries) > 0 {
		s.unstable = append(s.unstable, unstableAppend{id: id, entries: entries})
	}
	if !lazy {
		s.barrier = id
	}
}

// appended takes the journal's answer for append ev.id: the entries are
// durable, enter the tail, and what waited for them is released.
func (s *Machine) appended(ev Appended) {
	if ev.Err != nil {
		s.fail(fmt.Errorf("append: %w", ev.Err))
		return
	}
	s.completed = max(s.completed, ev.ID)
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

// Idle reports whether nothing is in flight: no engine step or tool run
// (a turn waiting for an approval waits in the log), no append.
func (s *Machine) Idle() bool {
	return (!s.busy || s.awaiting()) && s.completed == s.nextID
}

// Deadline is when the actor next needs a Tick: the end of the
// reconnect window, or the moment it may passivate or hibernate. Zero
// means never.
func (s *Machine) Deadline() time.Time {
	var d time.Time
	if s.hdr.Status == record.StatusInterrupted && !s.hdr.ExpiresAt.IsZero() {
		d = s.hdr.ExpiresAt
	}
	if len(s.conns) == 0 && s.Idle() && s.cfg.IdleTimeout > 0 {
		if idle := s.touch.Add(s.cfg.IdleTimeout); d.IsZero() || idle.Before(d) {
			d = idle
		}
	}
	if s.hibernatable() {
		if h := s.hibernateAt(); d.IsZero() || h.Before(d) {
			d = h
		}
	}
	return d
}

// Header returns the session's header as the machine has it.
func (s *Machine) Header() record.Header { return s.hdr }

// durableSeq is the newest seq known durable.
func (s *Machine) durableSeq() uint64 {
	if len(s.unstable) > 0 {
		return s.unstable[0].entries[0].Seq - 1
	}
	return s.hdr.LastSeq
}

func (s *Machine) attach(ev Attach, now time.Time) {
	h := &s.hdr
	if ev.NewReason == "" {
		refuse := func(res Opened) { s.now(Answer{Reply: ev.Reply, Result: res}) }
		switch {
		case h.UserID != ev.UserID:
			// Identical to an unknown id; nothing about the session changes.
			refuse(Opened{Err: &NotResumedError{Reason: ReasonNotFound}})
			return
		case h.Status == record.StatusCompleted:
			refuse(Opened{Err: &NotResumedError{Reason: ReasonCompleted}})
			return
		case h.Status == record.StatusExpired:
			refuse(Opened{Err: &NotResumedError{Reason: ReasonExpired}})
			return
		case h.Status == record.StatusInterrupted && !now.Before(h.ExpiresAt):
			s.expire(now)
			refuse(Opened{Err: &NotResumedError{Reason: ReasonExpired}})
			s.emit(Stop{})
			return
		}
		if err := MayReveal(*h, ev.AuthTime, now, s.cfg.ReauthMaxAge); err != nil {
			refuse(Opened{Err: err})
			return
		}
		if ev.LastSeq > h.LastSeq {
			refuse(Opened{Err: ErrBadLastSeq})
			return
		}
	}
	switch {
	case s.attached(ev.Conn):
	case ev.Shared && len(s.conns) >= s.cfg.MaxConns:
		s.now(Answer{Reply: ev.Reply, Result: Opened{Err: ErrTooManyConns}})
		return
	case ev.Shared:
		s.conns = append(s.conns, ev.Conn)
	default:
		for _, old := range s.conns {
			s.emit(CloseConn{Conn: old, Why: CloseSuperseded, Msg: "superseded by a newer connection"})
		}
		s.conns = append(s.conns[:0], ev.Conn)
	}
	reason := ev.NewReason
	if reason == "" {
		reason = ReasonResumed
		// Nothing the client is shown depends on this being durable: a
		// crash leaves the session interrupted, which resumes the same.
		h.Status, h.InterruptedAt, h.ExpiresAt, h.LastActiveAt = record.StatusActive, time.Time{}, time.Time{}, now
		s.appendBatch(nil, nil, true)
	}
	s.deliverTo(ev.Conn, s.sessionOut(reason))
	if reason == ReasonResumed {
		s.emit(Replay{Conn: ev.Conn, After: ev.LastSeq, Last: h.LastSeq})
	}
	s.catchUp(ev.Conn, ev.Stream)
	s.emit(Answer{Reply: ev.Reply, Result: Opened{Reason: reason}})
}

func (s *Machine) sessionOut(reason string) *SessionOut {
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

func (s *Machine) detach(ev Detach, now time.Time) {
	i := slices.Index(s.conns, ev.Conn)
	if ev.Conn == nil || i < 0 {
		return // a superseded connection going away changes nothing
	}
	s.conns = slices.Delete(s.conns, i, i+1)
	if len(s.conns) == 0 {
		s.conns = nil
	}
	if len(s.conns) > 0 || s.hdr.Status != record.StatusActive {
		return
	}
	s.markInterrupted(now)
	s.appendBatch(nil, nil, true)
}

// markInterrupted starts the reconnect window now: it counts from the
// moment the server learned of the disconnect.
func (s *Machine) markInterrupted(now time.Time) {
	s.hdr.Status = record.StatusInterrupted
	s.hdr.InterruptedAt = now
	s.hdr.ExpiresAt = now.Add(s.cfg.Window)
	s.hdr.LastActiveAt = now
}

func (s *Machine) setContext(ev SetContext, now time.Time) {
	merged := maps.Clone(s.ctx.User)
	if merged == nil {
		merged = make(map[string]any, len(ev.Set))
	}
	for k, v := range ev.Set {
		if v == nil {
			delete(merged, k)
		} else {
			merged[k] = v
		}
	}
	sensitive := s.hdr.Sensitive
	if v, ok := ev.Set["sensitive"].(bool); ok && v {
		sensitive = true
	}
	if sensitive {
		merged["sensitive"] = true // nothing clears the mark
	}
	if n := record.ValueSize(merged); n > s.cfg.MaxContextBytes {
		s.deliverTo(ev.Conn, &ErrorOut{Code: CodeTooLarge, Message: fmt.Sprintf(
			"the context would be %d bytes, the limit is %d; nothing was changed", n, s.cfg.MaxContextBytes)})
		return
	}
	s.ctx.User, s.hdr.Sensitive, s.contextDirty = merged, sensitive, true
	s.hdr.LastActiveAt = now
	s.appendBatch(nil, nil, false)
	s.deliverTo(ev.Conn, &ContextOut{Context: maps.Clone(merged)})
}

func (s *Machine) complete(now time.Time) {
	s.now(CancelTurn{})
	entries := s.abandonTurn("cancelled: session completed", now)
	s.hdr.Status = record.StatusCompleted
	s.hdr.LastActiveAt = now
	s.appendBatch(entries, nil, false)
	for _, e := range entries {
		s.deliver(&EntryOut{Entry: e})
	}
	s.deliver(&CompletedOut{SessionID: s.hdr.SessionID})
	s.closeAll(CloseCompleted, "session completed")
	s.emit(Ended{UserID: s.hdr.UserID, Status: record.StatusCompleted})
	s.emit(Stop{})
}

// expire ends an interrupted session whose window has passed.
func (s *Machine) expire(now time.Time) {
	s.now(CancelTurn{})
	entries := s.abandonTurn("cancelled: session expired", now)
	s.hdr.Status = record.StatusExpired
	s.appendBatch(entries, nil, false)
	s.emit(Ended{UserID: s.hdr.UserID, Status: record.StatusExpired})
}

func (s *Machine) tick(now time.Time) {
	h := &s.hdr
	if h.Status == record.StatusInterrupted && !now.Before(h.ExpiresAt) {
		s.expire(now)
		s.emit(Stop{})
		return
	}
	if len(s.conns) == 0 && s.Idle() && len(s.held) == 0 && s.cfg.IdleTimeout > 0 && !now.Before(s.touch.Add(s.cfg.IdleTimeout)) {
		s.now(Stop{}) // passivate: everything is in the log
		return
	}
	s.offerHibernation(now)
}
