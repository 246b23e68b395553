package actor

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/wal"
)

// Table tests of the pure state machine: no goroutines, no log, a clock
// moved by hand.

// tconn is a connection identity for the machine; the machine only compares
// and returns connections, it never calls them.
type tconn struct{ name string }

func (*tconn) Deliver(Out)       {}
func (*tconn) Close(int, string) {}

var machineTools = map[string]Tool{
	"search":  {Name: "search"},
	"isearch": {Name: "isearch", Idempotent: true},
	"payment": {Name: "payment", Sensitive: true},
}

const (
	testWindow = 5 * time.Minute
	testIdle   = time.Minute
	testReauth = 5 * time.Minute
)

func machineConfig() sessionConfig {
	return sessionConfig{
		Window: testWindow, IdleTimeout: testIdle, ReauthMaxAge: testReauth,
		Tool: func(name string) (Tool, bool) { t, ok := machineTools[name]; return t, ok },
	}
}

func baseMeta() wal.Meta {
	return wal.Meta{SessionID: "s1", UserID: "alice", Status: wal.StatusActive, CreatedAt: t0, LastActiveAt: t0, Epoch: 1}
}

// deepMeta copies m so later steps cannot change it through shared maps.
func deepMeta(m wal.Meta) wal.Meta {
	m.Context = maps.Clone(m.Context)
	m.AgentContext = maps.Clone(m.AgentContext)
	m.Turns = slices.Clone(m.Turns)
	if m.Pending != nil {
		p := *m.Pending
		p.Args = maps.Clone(p.Args)
		m.Pending = &p
	}
	return m
}

// newAttached is a brand-new session with c attached at t0.
func newAttached(t *testing.T) (*Session, *tconn) {
	t.Helper()
	s := newSession(machineConfig(), baseMeta(), t0)
	c := &tconn{"c1"}
	effs := s.Step(evAttach{conn: c, userID: "alice", newReason: ReasonNew, now: t0})
	wantTypes(t, "new attach", effs, effAppend{}, effOpened{}, effDeliver{})
	return s, c
}

// interruptedAt is a session with one exchange, detached at at.
func interruptedAt(t *testing.T, at time.Time) *Session {
	t.Helper()
	s, c := newAttached(t)
	s.Step(evSend{conn: c, id: "m1", content: "hi", now: t0})
	s.Step(evAction{userSeq: 1, action: Action{Reply: "hello"}, now: t0})
	if effs := s.Step(evDetach{conn: c, now: at}); len(effs) != 1 {
		t.Fatalf("detach: %v", effTypes(effs))
	}
	return s
}

func TestSessionNewAttach(t *testing.T) {
	s := newSession(machineConfig(), baseMeta(), t0)
	c := &tconn{"c1"}
	effs := s.Step(evAttach{conn: c, userID: "alice", newReason: ReasonNew, now: t0})
	wantTypes(t, "attach", effs, effAppend{}, effOpened{}, effDeliver{})
	if o := one[effOpened](t, effs); o.reason != ReasonNew || o.err != nil {
		t.Fatalf("opened = %+v", o)
	}
	d := one[effDeliver](t, effs)
	out, ok := d.out.(*SessionOut)
	if d.conn != c || !ok {
		t.Fatalf("deliver = %+v", d)
	}
	want := SessionOut{SessionID: "s1", Resumed: false, Reason: ReasonNew, Status: wal.StatusActive, Window: testWindow}
	if !reflect.DeepEqual(*out, want) {
		t.Fatalf("session out = %+v, want %+v", *out, want)
	}
	if len(only[effReplay](effs)) != 0 {
		t.Fatal("a new session must not replay")
	}
}

func TestSessionDetachResume(t *testing.T) {
	s, c1 := newAttached(t)
	s.Step(evSend{conn: c1, id: "m1", content: "hi", now: t0})
	s.Step(evAction{userSeq: 1, action: Action{Reply: "hello"}, now: t0})

	t1 := t0.Add(10 * time.Second)
	effs := s.Step(evDetach{conn: c1, now: t1})
	wantTypes(t, "detach", effs, effAppend{})
	ap := one[effAppend](t, effs)
	if len(ap.entries) != 0 {
		t.Fatalf("detach appended entries %v", ap.entries)
	}
	m := s.Meta()
	if m.Status != wal.StatusInterrupted || !m.InterruptedAt.Equal(t1) || !m.ExpiresAt.Equal(t1.Add(testWindow)) {
		t.Fatalf("after detach: status %s interrupted %v expires %v", m.Status, m.InterruptedAt, m.ExpiresAt)
	}
	if !sameMeta(ap.meta, m) {
		t.Fatalf("appended meta %+v differs from the machine's %+v", ap.meta, m)
	}

	// Resume one second before the window ends.
	c2 := &tconn{"c2"}
	t2 := m.ExpiresAt.Add(-time.Second)
	effs = s.Step(evAttach{conn: c2, userID: "alice", lastSeq: 1, now: t2})
	wantTypes(t, "resume", effs, effAppend{}, effOpened{}, effDeliver{}, effReplay{})
	if o := one[effOpened](t, effs); o.reason != ReasonResumed || o.err != nil {
		t.Fatalf("opened = %+v", o)
	}
	out := one[effDeliver](t, effs).out.(*SessionOut)
	if !out.Resumed || out.Reason != ReasonResumed || out.Status != wal.StatusActive || out.LastSeq != 2 || out.Window != testWindow {
		t.Fatalf("session out = %+v", out)
	}
	if r := one[effReplay](t, effs); r.conn != c2 || r.after != 1 || r.last != 2 {
		t.Fatalf("replay = %+v", r)
	}
	m = s.Meta()
	if m.Status != wal.StatusActive || !m.ExpiresAt.IsZero() || !m.InterruptedAt.IsZero() {
		t.Fatalf("after resume: %+v", m)
	}
	if ap := one[effAppend](t, effs); ap.meta.Status != wal.StatusActive {
		t.Fatalf("resume appended status %s", ap.meta.Status)
	}
}

func TestSessionAttachAtOrAfterExpiry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{{"at", 0}, {"after", time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			t1 := t0.Add(time.Minute)
			s := interruptedAt(t, t1)
			at := s.Meta().ExpiresAt.Add(tc.after)
			effs := s.Step(evAttach{conn: &tconn{"c2"}, userID: "alice", now: at})
			wantTypes(t, "late attach", effs, effCancelTurn{}, effAppend{}, effOpened{}, effStop{})
			if o := one[effOpened](t, effs); o.reason != ReasonExpired || o.err != nil {
				t.Fatalf("opened = %+v", o)
			}
			if ap := one[effAppend](t, effs); ap.meta.Status != wal.StatusExpired {
				t.Fatalf("appended status %s", ap.meta.Status)
			}
			if s.Meta().Status != wal.StatusExpired || s.conn != nil {
				t.Fatalf("status %s conn %v", s.Meta().Status, s.conn)
			}
		})
	}
}

func TestSessionTickExpiry(t *testing.T) {
	t1 := t0.Add(time.Minute)
	s := interruptedAt(t, t1)
	exp := s.Meta().ExpiresAt
	// A send left a turn in flight, so idleness does not stop the actor
	// first; only the window does.
	s.busy = true
	if effs := s.Step(evTick{now: exp.Add(-time.Nanosecond)}); len(effs) != 0 {
		t.Fatalf("tick before expiry: %v", effTypes(effs))
	}
	effs := s.Step(evTick{now: exp})
	wantTypes(t, "tick at expiry", effs, effCancelTurn{}, effAppend{}, effStop{})
	if s.Meta().Status != wal.StatusExpired || one[effAppend](t, effs).meta.Status != wal.StatusExpired {
		t.Fatalf("status %s", s.Meta().Status)
	}
	if s.busy {
		t.Fatal("expiry leaves the machine busy")
	}
}

func TestSessionTickIdle(t *testing.T) {
	t1 := t0.Add(10 * time.Second)
	s := interruptedAt(t, t1)
	if effs := s.Step(evTick{now: t1.Add(testIdle - time.Nanosecond)}); len(effs) != 0 {
		t.Fatalf("tick before idle: %v", effTypes(effs))
	}
	effs := s.Step(evTick{now: t1.Add(testIdle)})
	wantTypes(t, "idle tick", effs, effStop{})
	if s.Meta().Status != wal.StatusInterrupted {
		t.Fatalf("passivation changed status to %s", s.Meta().Status)
	}

	t.Run("attached", func(t *testing.T) {
		s, _ := newAttached(t)
		if effs := s.Step(evTick{now: t0.Add(time.Hour)}); len(effs) != 0 {
			t.Fatalf("attached idle tick: %v", effTypes(effs))
		}
	})
	t.Run("busy", func(t *testing.T) {
		s, c := newAttached(t)
		s.Step(evSend{conn: c, id: "m1", content: "hi", now: t0})
		s.Step(evDetach{conn: c, now: t0})
		if effs := s.Step(evTick{now: t0.Add(2 * testIdle)}); len(effs) != 0 {
			t.Fatalf("busy idle tick: %v", effTypes(effs))
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
		{"fresh, no conn", func(*testing.T) *Session { return newSession(machineConfig(), baseMeta(), t0) }, t0.Add(testIdle)},
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
		{"no idle timeout", func(*testing.T) *Session {
			cfg := machineConfig()
			cfg.IdleTimeout = 0
			return newSession(cfg, baseMeta(), t0)
		}, time.Time{}},
		{"busy, attached", func(t *testing.T) *Session {
			s, c := newAttached(t)
			s.Step(evSend{conn: c, id: "m1", content: "hi", now: t0})
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

func TestSessionAttachRefusals(t *testing.T) {
	interrupted := func(m *wal.Meta) {
		m.Status = wal.StatusInterrupted
		m.LastSeq = 3
		m.InterruptedAt = t0
		m.ExpiresAt = t0.Add(testWindow)
	}
	now := t0.Add(time.Minute)
	cases := []struct {
		name   string
		meta   func(*wal.Meta)
		ev     evAttach
		reason string
		err    error
	}{
		{"other user", interrupted, evAttach{userID: "mallory"}, ReasonNotFound, nil},
		{"other user, sensitive", func(m *wal.Meta) { interrupted(m); m.Sensitive = true }, evAttach{userID: "mallory"}, ReasonNotFound, nil},
		{"completed", func(m *wal.Meta) { m.Status = wal.StatusCompleted }, evAttach{userID: "alice"}, ReasonCompleted, nil},
		{"expired", func(m *wal.Meta) { m.Status = wal.StatusExpired }, evAttach{userID: "alice"}, ReasonExpired, nil},
		{"sensitive, no auth_time", func(m *wal.Meta) { interrupted(m); m.Sensitive = true }, evAttach{userID: "alice"}, "", ErrReauthRequired},
		{"sensitive, old auth_time", func(m *wal.Meta) { interrupted(m); m.Sensitive = true },
			evAttach{userID: "alice", authTime: now.Add(-testReauth - time.Second)}, "", ErrReauthRequired},
		{"last_seq beyond log", interrupted, evAttach{userID: "alice", lastSeq: 4}, "", ErrBadLastSeq},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := baseMeta()
			tc.meta(&m)
			s := newSession(machineConfig(), m, t0)
			before := deepMeta(s.Meta())
			ev := tc.ev
			ev.conn, ev.now = &tconn{"c"}, now
			effs := s.Step(ev)
			wantTypes(t, "attach", effs, effOpened{})
			o := effs[0].(effOpened)
			if o.reason != tc.reason || !errors.Is(o.err, tc.err) || (tc.err == nil) != (o.err == nil) {
				t.Fatalf("opened = %+v, want reason %q err %v", o, tc.reason, tc.err)
			}
			if !reflect.DeepEqual(s.Meta(), before) {
				t.Fatalf("meta changed:\n got %+v\nwant %+v", s.Meta(), before)
			}
			if s.conn != nil {
				t.Fatal("a refused attach attached its conn")
			}
		})
	}
}

func TestSessionRefusalKeepsAttachedConn(t *testing.T) {
	s, c1 := newAttached(t)
	s.Step(evContext{conn: c1, set: map[string]any{"sensitive": true}, now: t0})
	before := deepMeta(s.Meta())
	for _, ev := range []evAttach{
		{conn: &tconn{"mallory"}, userID: "mallory", now: t0},
		{conn: &tconn{"stale"}, userID: "alice", now: t0},
		{conn: &tconn{"future"}, userID: "alice", authTime: t0, lastSeq: 99, now: t0},
	} {
		effs := s.Step(ev)
		wantTypes(t, "refused attach", effs, effOpened{})
		if s.conn != c1 || !reflect.DeepEqual(s.Meta(), before) {
			t.Fatalf("refused attach by %v changed the session", ev.conn)
		}
	}
}

func TestSessionSensitiveFreshLogin(t *testing.T) {
	m := baseMeta()
	m.Status, m.Sensitive, m.ExpiresAt = wal.StatusInterrupted, true, t0.Add(testWindow)
	for _, age := range []time.Duration{0, time.Minute, testReauth} {
		s := newSession(machineConfig(), m, t0)
		now := t0.Add(time.Minute)
		effs := s.Step(evAttach{conn: &tconn{"c"}, userID: "alice", authTime: now.Add(-age), now: now})
		if o := one[effOpened](t, effs); o.reason != ReasonResumed || o.err != nil {
			t.Fatalf("auth_time %v old: opened = %+v", age, o)
		}
		if !one[effDeliver](t, effs).out.(*SessionOut).Sensitive {
			t.Fatal("session out does not say sensitive")
		}
	}
}

func TestSessionSupersede(t *testing.T) {
	s, c1 := newAttached(t)
	c2 := &tconn{"c2"}
	effs := s.Step(evAttach{conn: c2, userID: "alice", now: t0.Add(time.Second)})
	wantTypes(t, "second attach", effs, effClose{}, effAppend{}, effOpened{}, effDeliver{}, effReplay{})
	if cl := effs[0].(effClose); cl.conn != c1 || cl.code != CloseSuperseded {
		t.Fatalf("close = %+v", cl)
	}
	if s.conn != c2 {
		t.Fatal("the new conn is not attached")
	}
	before := deepMeta(s.Meta())
	if effs := s.Step(evDetach{conn: c1, now: t0.Add(2 * time.Second)}); len(effs) != 0 {
		t.Fatalf("superseded detach: %v", effTypes(effs))
	}
	if s.conn != c2 || !reflect.DeepEqual(s.Meta(), before) || s.Meta().Status != wal.StatusActive {
		t.Fatalf("superseded detach changed the session: %+v", s.Meta())
	}
	// The old conn can no longer act on the session.
	for _, ev := range []any{
		evSend{conn: c1, id: "x", content: "x"},
		evContext{conn: c1, set: map[string]any{"a": 1}},
		evComplete{conn: c1},
		evHistory{conn: c1},
	} {
		if effs := s.Step(ev); len(effs) != 0 {
			t.Fatalf("%T from a superseded conn: %v", ev, effTypes(effs))
		}
	}
	if !reflect.DeepEqual(s.Meta(), before) {
		t.Fatal("a superseded conn changed the session")
	}
	// Attaching the same conn again does not close it.
	effs = s.Step(evAttach{conn: c2, userID: "alice", now: t0.Add(3 * time.Second)})
	if len(only[effClose](effs)) != 0 {
		t.Fatalf("re-attach of the same conn closed it: %v", effTypes(effs))
	}
}
