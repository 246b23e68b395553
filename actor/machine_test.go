package actor

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal"
)

// Table tests of the pure state machine: Step with explicit times, no
// goroutines, no log. Appends are completed by hand (evAppended).

// tconn is a connection identity: the machine only compares and returns
// connections, it never calls them.
type tconn struct{ name string }

func (*tconn) Deliver(Out)               {}
func (*tconn) Close(CloseReason, string) {}

var machineTools = map[string]engine.Tool{
	"search":  {Name: "search"},
	"isearch": {Name: "isearch", Idempotent: true},
	"payment": {Name: "payment", Sensitive: true},
}

func machineConfig() sessionConfig {
	return sessionConfig{
		Window: testWindow, IdleTimeout: testIdle, ReauthMaxAge: testReauth,
		MaxTurns: 4, MaxConns: 2, MaxContextBytes: 1024, TailEntries: 8, TailBytes: 1 << 20,
		Tool: func(name string) (engine.Tool, bool) { t, ok := machineTools[name]; return t, ok },
	}
}

func baseHeader() wal.Header {
	return wal.Header{SessionID: "s1", UserID: "alice", Status: wal.StatusActive, CreatedAt: t0, LastActiveAt: t0, Epoch: 1}
}

func machine(h wal.Header, st state, newest ...wal.Entry) *Session {
	return newSession(machineConfig(), wal.SessionData{Header: h}, st, contexts{}, newest, t0)
}

// newAttached is a brand-new session with c attached at t0.
func newAttached(t *testing.T) (*Session, *tconn) {
	t.Helper()
	s := machine(baseHeader(), state{})
	c := &tconn{"c1"}
	effs := s.Step(t0, evAttach{conn: c, userID: "alice", newReason: ReasonNew})
	wantTypes(t, "new attach", effs, effDeliver{}, effOpened{})
	return s, c
}

// durable steps ev and completes every append that follows from it, in
// order, returning every effect.
func durable(s *Session, now time.Time, ev Event) []Effect {
	out := s.Step(now, ev)
	for i := 0; i < len(out); i++ {
		if ap, ok := out[i].(effAppend); ok {
			out = append(out, s.Step(now, evAppended{id: ap.id})...)
		}
	}
	return out
}

// exchanged is a new session after one durable exchange: user entry 1,
// agent reply 2.
func exchanged(t *testing.T) (*Session, *tconn) {
	t.Helper()
	s, c := newAttached(t)
	durable(s, t0, evSend{conn: c, id: "m1", content: "hi"})
	durable(s, t0, evAction{step: s.step, userSeq: 1, action: engine.Action{Reply: "hello"}})
	if s.hdr.LastSeq != 2 || s.busy || !s.idle() {
		t.Fatalf("after one exchange: last %d busy %v idle %v", s.hdr.LastSeq, s.busy, s.idle())
	}
	return s, c
}

// interruptedAt is a session with one exchange, detached at at.
func interruptedAt(t *testing.T, at time.Time) *Session {
	t.Helper()
	s, c := exchanged(t)
	effs := durable(s, at, evDetach{conn: c})
	wantTypes(t, "detach", effs, effAppend{})
	return s
}

func TestSessionNewAttach(t *testing.T) {
	s := machine(baseHeader(), state{})
	c := &tconn{"c1"}
	effs := s.Step(t0, evAttach{conn: c, userID: "alice", newReason: ReasonNew})
	// A new session is already stored active: nothing to append.
	wantTypes(t, "attach", effs, effDeliver{}, effOpened{})
	if o := one[effOpened](t, effs); o.res.reason != ReasonNew || o.res.err != nil {
		t.Fatalf("opened = %+v", o)
	}
	d := one[effDeliver](t, effs)
	want := SessionOut{SessionID: "s1", Reason: ReasonNew, Status: wal.StatusActive, Window: testWindow}
	if out, ok := d.out.(*SessionOut); d.conn != c || !ok || !reflect.DeepEqual(*out, want) {
		t.Fatalf("deliver = %+v, want %+v", d, want)
	}
}

func TestSessionDetachResume(t *testing.T) {
	s, c1 := exchanged(t)
	t1 := t0.Add(10 * time.Second)
	effs := s.Step(t1, evDetach{conn: c1})
	wantTypes(t, "detach", effs, effAppend{})
	ap := effs[0].(effAppend)
	if !ap.lazy || len(ap.batch.Entries) != 0 {
		t.Fatalf("detach append = %+v, want a lazy status change", ap)
	}
	h := s.Header()
	if h.Status != wal.StatusInterrupted || !h.InterruptedAt.Equal(t1) || !h.ExpiresAt.Equal(t1.Add(testWindow)) {
		t.Fatalf("after detach: %+v", h)
	}
	if !reflect.DeepEqual(ap.batch.Header, h) {
		t.Fatalf("appended header %+v differs from the machine's %+v", ap.batch.Header, h)
	}
	if got := s.Step(t1, evAppended{id: ap.id}); len(got) != 0 {
		t.Fatalf("a lazy append held %v", effTypes(got))
	}

	// Resume one second before the window ends: nothing it shows is new,
	// so nothing waits for the status change to be durable.
	c2 := &tconn{"c2"}
	t2 := h.ExpiresAt.Add(-time.Second)
	effs = s.Step(t2, evAttach{conn: c2, userID: "alice", lastSeq: 1})
	wantTypes(t, "resume", effs, effAppend{}, effDeliver{}, effReplay{}, effOpened{})
	if ap := effs[0].(effAppend); !ap.lazy || ap.batch.Header.Status != wal.StatusActive {
		t.Fatalf("resume append = %+v", ap)
	}
	out := effs[1].(effDeliver).out.(*SessionOut)
	if !out.Resumed || out.Reason != ReasonResumed || out.Status != wal.StatusActive || out.LastSeq != 2 || out.Window != testWindow {
		t.Fatalf("session out = %+v", out)
	}
	if r := effs[2].(effReplay); r.conn != c2 || r.after != 1 || r.last != 2 {
		t.Fatalf("replay = %+v", r)
	}
	if o := effs[3].(effOpened); o.res.reason != ReasonResumed || o.res.err != nil {
		t.Fatalf("opened = %+v", o)
	}
	if h := s.Header(); h.Status != wal.StatusActive || !h.ExpiresAt.IsZero() || !h.InterruptedAt.IsZero() || !slices.Equal(s.conns, []Conn{c2}) {
		t.Fatalf("after resume: %+v", h)
	}
}

func TestSessionSupersede(t *testing.T) {
	s, c1 := exchanged(t)
	c2 := &tconn{"c2"}
	effs := s.Step(t0.Add(time.Second), evAttach{conn: c2, userID: "alice", lastSeq: 2})
	wantTypes(t, "second attach", effs, effClose{}, effAppend{}, effDeliver{}, effReplay{}, effOpened{})
	if cl := effs[0].(effClose); cl.conn != c1 || cl.why != CloseSuperseded {
		t.Fatalf("close = %+v", cl)
	}
	if d := effs[2].(effDeliver); d.conn != c2 || !slices.Equal(s.conns, []Conn{c2}) {
		t.Fatalf("session frame went to %v; attached %v", d.conn, s.conns)
	}
	s.Step(t0, evAppended{id: effs[1].(effAppend).id})
	before := s.Header()
	// The old conn going away late, or acting, changes nothing.
	for _, ev := range []Event{
		evDetach{conn: c1},
		evSend{conn: c1, id: "x", content: "x"},
		evContext{conn: c1, set: map[string]any{"a": 1}},
		evComplete{conn: c1},
		evHistory{conn: c1},
		evSendChecked{send: evSend{conn: c1, id: "y"}},
	} {
		if effs := s.Step(t0.Add(2*time.Second), ev); len(effs) != 0 {
			t.Fatalf("%T from a superseded conn: %v", ev, effTypes(effs))
		}
	}
	if !slices.Equal(s.conns, []Conn{c2}) || !reflect.DeepEqual(s.Header(), before) {
		t.Fatalf("a superseded conn changed the session: %+v", s.Header())
	}
	// Attaching the same conn again does not close it.
	effs = s.Step(t0.Add(3*time.Second), evAttach{conn: c2, userID: "alice", lastSeq: 2})
	if len(only[effClose](effs)) != 0 {
		t.Fatalf("re-attach of the same conn closed it: %v", effTypes(effs))
	}
}

func TestSessionAttachRefusals(t *testing.T) {
	interrupted := func(h *wal.Header) {
		h.Status, h.LastSeq, h.InterruptedAt, h.ExpiresAt = wal.StatusInterrupted, 3, t0, t0.Add(testWindow)
	}
	now := t0.Add(time.Minute)
	cases := []struct {
		name   string
		hdr    func(*wal.Header)
		ev     evAttach
		reason string
		err    error
	}{
		{"other user", interrupted, evAttach{userID: "mallory"}, ReasonNotFound, nil},
		{"other user, sensitive", func(h *wal.Header) { interrupted(h); h.Sensitive = true }, evAttach{userID: "mallory", authTime: now}, ReasonNotFound, nil},
		{"completed", func(h *wal.Header) { h.Status = wal.StatusCompleted }, evAttach{userID: "alice"}, ReasonCompleted, nil},
		{"expired", func(h *wal.Header) { h.Status = wal.StatusExpired }, evAttach{userID: "alice"}, ReasonExpired, nil},
		{"sensitive, no auth_time", func(h *wal.Header) { interrupted(h); h.Sensitive = true }, evAttach{userID: "alice"}, "", ErrReauthRequired},
		{"sensitive, old auth_time", func(h *wal.Header) { interrupted(h); h.Sensitive = true },
			evAttach{userID: "alice", authTime: now.Add(-testReauth - time.Second)}, "", ErrReauthRequired},
		{"last_seq beyond the log", interrupted, evAttach{userID: "alice", lastSeq: 4}, "", ErrBadLastSeq},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := baseHeader()
			tc.hdr(&h)
			s := machine(h, state{})
			before := s.Header()
			ev := tc.ev
			ev.conn = &tconn{"c"}
			effs := s.Step(now, ev)
			wantTypes(t, "attach", effs, effOpened{})
			res := effs[0].(effOpened).res
			if res.reason != "" {
				t.Fatalf("a refusal carries reason %q", res.reason)
			}
			if tc.reason != "" {
				if got := notResumedReason(res.err); got != tc.reason {
					t.Fatalf("err = %v, want not resumed: %s", res.err, tc.reason)
				}
			} else if !errors.Is(res.err, tc.err) {
				t.Fatalf("err = %v, want %v", res.err, tc.err)
			}
			if !reflect.DeepEqual(s.Header(), before) || len(s.conns) != 0 || s.nextID != 0 {
				t.Fatalf("a refused attach changed the session: %+v conn %v", s.Header(), s.conns)
			}
		})
	}
}

func TestSessionRefusalKeepsAttachedConn(t *testing.T) {
	s, c1 := newAttached(t)
	durable(s, t0, evContext{conn: c1, set: map[string]any{"sensitive": true}})
	before := s.Header()
	for _, ev := range []evAttach{
		{conn: &tconn{"mallory"}, userID: "mallory", authTime: t0},
		{conn: &tconn{"stale"}, userID: "alice"},
		{conn: &tconn{"future"}, userID: "alice", authTime: t0, lastSeq: 99},
	} {
		effs := s.Step(t0, ev)
		wantTypes(t, "refused attach", effs, effOpened{})
		if !slices.Equal(s.conns, []Conn{c1}) || !reflect.DeepEqual(s.Header(), before) {
			t.Fatalf("refused attach by %v changed the session", ev.conn)
		}
	}
}

func TestSessionAttachAfterWindow(t *testing.T) {
	for _, after := range []time.Duration{0, time.Hour} {
		s := interruptedAt(t, t0.Add(time.Minute))
		at := s.Header().ExpiresAt.Add(after)
		effs := s.Step(at, evAttach{conn: &tconn{"late"}, userID: "alice", lastSeq: 2})
		// The refusal needs nothing durable; the stop waits for the expiry.
		wantTypes(t, "late attach", effs, effCancelTurn{}, effAppend{}, effOpened{})
		if got := notResumedReason(effs[2].(effOpened).res.err); got != ReasonExpired {
			t.Fatalf("opened = %+v", effs[2])
		}
		if ap := effs[1].(effAppend); ap.lazy || ap.batch.Header.Status != wal.StatusExpired {
			t.Fatalf("append = %+v", ap)
		}
		effs = s.Step(at, evAppended{id: effs[1].(effAppend).id})
		wantTypes(t, "expiry durable", effs, effStatus{}, effStop{})
		if st := effs[0].(effStatus); st.status != wal.StatusExpired || st.userID != "alice" {
			t.Fatalf("status = %+v", st)
		}
		if s.Header().Status != wal.StatusExpired || len(s.conns) != 0 {
			t.Fatalf("status %s conn %v", s.Header().Status, s.conns)
		}
	}
}

func TestSessionSensitiveFreshLogin(t *testing.T) {
	h := baseHeader()
	h.Status, h.Sensitive, h.ExpiresAt = wal.StatusInterrupted, true, t0.Add(testWindow)
	now := t0.Add(time.Minute)
	for _, age := range []time.Duration{0, time.Minute, testReauth} {
		s := machine(h, state{})
		effs := s.Step(now, evAttach{conn: &tconn{"c"}, userID: "alice", authTime: now.Add(-age)})
		if o := one[effOpened](t, effs); o.res.reason != ReasonResumed || o.res.err != nil {
			t.Fatalf("auth_time %v old: opened = %+v", age, o)
		}
		if !one[effDeliver](t, effs).out.(*SessionOut).Sensitive {
			t.Fatal("the session frame does not say sensitive")
		}
	}
	if err := MayReveal(h, now.Add(-testReauth-time.Nanosecond), now, testReauth); !errors.Is(err, ErrReauthRequired) {
		t.Fatalf("MayReveal of a stale login: %v", err)
	}
	h.Sensitive = false
	if err := MayReveal(h, time.Time{}, now, testReauth); err != nil {
		t.Fatalf("MayReveal of a plain session: %v", err)
	}
}

func TestSessionTick(t *testing.T) {
	t1 := t0.Add(10 * time.Second)
	t.Run("expiry", func(t *testing.T) {
		s := interruptedAt(t, t1)
		s.cfg.IdleTimeout = time.Hour
		exp := s.Header().ExpiresAt
		if effs := s.Step(exp.Add(-time.Nanosecond), evTick{}); len(effs) != 0 {
			t.Fatalf("tick before expiry: %v", effTypes(effs))
		}
		effs := durable(s, exp, evTick{})
		wantTypes(t, "tick at expiry", effs, effCancelTurn{}, effAppend{}, effStatus{}, effStop{})
		if s.Header().Status != wal.StatusExpired {
			t.Fatalf("status %s", s.Header().Status)
		}
	})
	t.Run("expiry abandons the turn", func(t *testing.T) {
		s, c := exchanged(t)
		durable(s, t0, evSend{conn: c, id: "m2", content: "q"})
		durable(s, t0, evAction{step: s.step, userSeq: 3, action: engine.Action{Call: &engine.Call{Name: "search"}}})
		durable(s, t1, evDetach{conn: c})
		effs := durable(s, s.Header().ExpiresAt, evTick{})
		ap := one[effAppend](t, effs)
		if len(ap.batch.Entries) != 1 || mdString(ap.batch.Entries[0], "status") != engine.ToolFailed ||
			ap.batch.Entries[0].Content != "cancelled: session expired" {
			t.Fatalf("expiry appended %+v, want the call logged failed", ap.batch.Entries)
		}
		if s.busy || s.st.Pending != nil || len(s.st.Turns) != 0 {
			t.Fatalf("expired with work: %+v busy %v", s.st, s.busy)
		}
	})
	t.Run("idle", func(t *testing.T) {
		s := interruptedAt(t, t1)
		if effs := s.Step(t1.Add(testIdle-time.Nanosecond), evTick{}); len(effs) != 0 {
			t.Fatalf("tick before idle: %v", effTypes(effs))
		}
		effs := s.Step(t1.Add(testIdle), evTick{})
		wantTypes(t, "idle tick", effs, effStop{})
		if s.Header().Status != wal.StatusInterrupted {
			t.Fatalf("passivation changed the status to %s", s.Header().Status)
		}
	})
	t.Run("attached", func(t *testing.T) {
		s, _ := newAttached(t)
		if effs := s.Step(t0.Add(time.Hour), evTick{}); len(effs) != 0 {
			t.Fatalf("attached idle tick: %v", effTypes(effs))
		}
	})
	t.Run("turn in flight", func(t *testing.T) {
		s, c := newAttached(t)
		durable(s, t0, evSend{conn: c, id: "m1", content: "hi"})
		durable(s, t0, evDetach{conn: c})
		if effs := s.Step(t0.Add(2*testIdle), evTick{}); len(effs) != 0 {
			t.Fatalf("busy idle tick: %v", effTypes(effs))
		}
	})
	t.Run("append in flight", func(t *testing.T) {
		s, c := exchanged(t)
		s.Step(t1, evDetach{conn: c}) // its lazy append not answered yet
		if effs := s.Step(t1.Add(2*testIdle), evTick{}); len(effs) != 0 {
			t.Fatalf("tick with an append in flight: %v", effTypes(effs))
		}
	})
}

func TestSessionDeadline(t *testing.T) {
	t1 := t0.Add(10 * time.Second)
	cases := []struct {
		name string
		s    func(t *testing.T) *Session
		want time.Time
	}{
		{"attached", func(t *testing.T) *Session { s, _ := newAttached(t); return s }, time.Time{}},
		{"fresh, no conn", func(*testing.T) *Session { return machine(baseHeader(), state{}) }, t0.Add(testIdle)},
		{"interrupted, idle first", func(t *testing.T) *Session { return interruptedAt(t, t1) }, t1.Add(testIdle)},
		{"interrupted, window first", func(t *testing.T) *Session {
			s := interruptedAt(t, t1)
			s.cfg.IdleTimeout = time.Hour
			return s
		}, t1.Add(testWindow)},
		{"interrupted, busy", func(t *testing.T) *Session {
			s := interruptedAt(t, t1)
			s.busy = true
			return s
		}, t1.Add(testWindow)},
		{"interrupted, append in flight", func(t *testing.T) *Session {
			s, c := exchanged(t)
			s.Step(t1, evDetach{conn: c})
			return s
		}, t1.Add(testWindow)},
		{"no idle timeout", func(*testing.T) *Session {
			cfg := machineConfig()
			cfg.IdleTimeout = 0
			return newSession(cfg, wal.SessionData{Header: baseHeader()}, state{}, contexts{}, nil, t0)
		}, time.Time{}},
		{"busy, attached", func(t *testing.T) *Session {
			s, c := newAttached(t)
			durable(s, t0, evSend{conn: c, id: "m1", content: "hi"})
			return s
		}, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s(t).Deadline(); !got.Equal(tc.want) {
				t.Fatalf("Deadline = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSessionShutdownAndHistory(t *testing.T) {
	s, c := newAttached(t)
	effs := s.Step(t0, evHistory{conn: c, before: 7, limit: 3})
	wantTypes(t, "history", effs, effHistory{})
	if h := effs[0].(effHistory); h.conn != c || h.before != 7 || h.limit != 3 {
		t.Fatalf("history = %+v", h)
	}
	before := s.Header()
	effs = s.Step(t0, evShutdown{})
	wantTypes(t, "shutdown", effs, effCancelTurn{}, effClose{}, effStop{})
	if cl := effs[1].(effClose); cl.conn != c || cl.why != CloseShutdown {
		t.Fatalf("close = %+v", cl)
	}
	// The next boot must find the session as it was: a shutdown is no
	// disconnect the machine records.
	if !reflect.DeepEqual(s.Header(), before) || s.nextID != 0 {
		t.Fatal("shutdown changed the session")
	}
}
