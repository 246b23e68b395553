package machine

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine/machinetest"

	"github.com/tether-dev/tether/wal/record"
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

func machineConfig() Config {
	return Config{
		Window: testWindow, IdleTimeout: testIdle, ReauthMaxAge: testReauth,
		MaxTurns: 4, MaxConns: 2, MaxContextBytes: 1024, TailEntries: 8, TailBytes: 1 << 20,
		Tool: func(name string) (engine.Tool, bool) { t, ok := machineTools[name]; return t, ok },
	}
}

func baseHeader() record.Header {
	return record.Header{SessionID: "s1", UserID: "alice", Status: record.StatusActive, CreatedAt: t0, LastActiveAt: t0, Epoch: 1}
}

func machine(h record.Header, st state, newest ...record.Entry) *Machine {
	b, err := encodeState(st)
	if err != nil {
		panic(err)
	}
	h.State = b
	m, _ := New(machineConfig(), Restore{Data: record.SessionData{Header: h}, Newest: newest}, t0)
	return m
}

// newAttached is a brand-new session with c attached at t0.
func newAttached(t *testing.T) (*Machine, *tconn) {
	t.Helper()
	s := machine(baseHeader(), state{})
	c := &tconn{"c1"}
	effs := s.Step(t0, Attach{Conn: c, UserID: "alice", NewReason: ReasonNew})
	wantTypes(t, "new attach", effs, Deliver{}, Answer{})
	return s, c
}

// durable steps ev and completes every append that follows from it, in
// order, returning every effect.
func durable(s *Machine, now time.Time, ev Event) []Effect {
	out := s.Step(now, ev)
	for i := 0; i < len(out); i++ {
		if ap, ok := out[i].(Append); ok {
			out = append(out, s.Step(now, Appended{ID: ap.ID})...)
		}
	}
	return out
}

// exchanged is a new session after one durable exchange: user entry 1,
// agent reply 2.
func exchanged(t *testing.T) (*Machine, *tconn) {
	t.Helper()
	s, c := newAttached(t)
	durable(s, t0, Send{Conn: c, ID: "m1", Content: "hi"})
	durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "hello"}})
	if s.hdr.LastSeq != 2 || s.busy || !s.Idle() {
		t.Fatalf("after one exchange: last %d busy %v idle %v", s.hdr.LastSeq, s.busy, s.Idle())
	}
	return s, c
}

// interruptedAt is a session with one exchange, detached at at.
func interruptedAt(t *testing.T, at time.Time) *Machine {
	t.Helper()
	s, c := exchanged(t)
	effs := durable(s, at, Detach{Conn: c})
	wantTypes(t, "detach", effs, Append{})
	return s
}

func TestSessionNewAttach(t *testing.T) {
	s := machine(baseHeader(), state{})
	c := &tconn{"c1"}
	effs := s.Step(t0, Attach{Conn: c, UserID: "alice", NewReason: ReasonNew})
	// A new session is already stored active: nothing to append.
	wantTypes(t, "attach", effs, Deliver{}, Answer{})
	if o := one[Answer](t, effs); o.Result.Reason != ReasonNew || o.Result.Err != nil {
		t.Fatalf("opened = %+v", o)
	}
	d := one[Deliver](t, effs)
	want := SessionOut{SessionID: "s1", Reason: ReasonNew, Status: record.StatusActive, Window: testWindow}
	if out, ok := d.Out.(*SessionOut); d.Conn != c || !ok || !reflect.DeepEqual(*out, want) {
		t.Fatalf("deliver = %+v, want %+v", d, want)
	}
}

func TestSessionDetachResume(t *testing.T) {
	s, c1 := exchanged(t)
	t1 := t0.Add(10 * time.Second)
	effs := s.Step(t1, Detach{Conn: c1})
	wantTypes(t, "detach", effs, Append{})
	ap := effs[0].(Append)
	if !ap.Lazy || len(ap.Batch.Entries) != 0 {
		t.Fatalf("detach append = %+v, want a lazy status change", ap)
	}
	h := s.Header()
	if h.Status != record.StatusInterrupted || !h.InterruptedAt.Equal(t1) || !h.ExpiresAt.Equal(t1.Add(testWindow)) {
		t.Fatalf("after detach: %+v", h)
	}
	if !reflect.DeepEqual(ap.Batch.Header, h) {
		t.Fatalf("appended header %+v differs from the machine's %+v", ap.Batch.Header, h)
	}
	if got := s.Step(t1, Appended{ID: ap.ID}); len(got) != 0 {
		t.Fatalf("a lazy append held %v", effTypes(got))
	}

	// Resume one second before the window ends: nothing it shows is new,
	// so nothing waits for the status change to be durable.
	c2 := &tconn{"c2"}
	t2 := h.ExpiresAt.Add(-time.Second)
	effs = s.Step(t2, Attach{Conn: c2, UserID: "alice", LastSeq: 1})
	wantTypes(t, "resume", effs, Append{}, Deliver{}, Replay{}, Answer{})
	if ap := effs[0].(Append); !ap.Lazy || ap.Batch.Header.Status != record.StatusActive {
		t.Fatalf("resume append = %+v", ap)
	}
	out := effs[1].(Deliver).Out.(*SessionOut)
	if !out.Resumed || out.Reason != ReasonResumed || out.Status != record.StatusActive || out.LastSeq != 2 || out.Window != testWindow {
		t.Fatalf("session out = %+v", out)
	}
	if r := effs[2].(Replay); r.Conn != c2 || r.After != 1 || r.Last != 2 {
		t.Fatalf("replay = %+v", r)
	}
	if o := effs[3].(Answer); o.Result.Reason != ReasonResumed || o.Result.Err != nil {
		t.Fatalf("opened = %+v", o)
	}
	if h := s.Header(); h.Status != record.StatusActive || !h.ExpiresAt.IsZero() || !h.InterruptedAt.IsZero() || !slices.Equal(s.conns, []Conn{c2}) {
		t.Fatalf("after resume: %+v", h)
	}
}

func TestSessionSupersede(t *testing.T) {
	s, c1 := exchanged(t)
	c2 := &tconn{"c2"}
	effs := s.Step(t0.Add(time.Second), Attach{Conn: c2, UserID: "alice", LastSeq: 2})
	wantTypes(t, "second attach", effs, CloseConn{}, Append{}, Deliver{}, Replay{}, Answer{})
	if cl := effs[0].(CloseConn); cl.Conn != c1 || cl.Why != CloseSuperseded {
		t.Fatalf("close = %+v", cl)
	}
	if d := effs[2].(Deliver); d.Conn != c2 || !slices.Equal(s.conns, []Conn{c2}) {
		t.Fatalf("session frame went to %v; attached %v", d.Conn, s.conns)
	}
	s.Step(t0, Appended{ID: effs[1].(Append).ID})
	before := s.Header()
	// The old conn going away late, or acting, changes nothing.
	for _, ev := range []Event{
		Detach{Conn: c1},
		Send{Conn: c1, ID: "x", Content: "x"},
		SetContext{Conn: c1, Set: map[string]any{"a": 1}},
		Complete{Conn: c1},
		HistoryRequest{Conn: c1},
		SendChecked{Send: Send{Conn: c1, ID: "y"}},
	} {
		if effs := s.Step(t0.Add(2*time.Second), ev); len(effs) != 0 {
			t.Fatalf("%T from a superseded conn: %v", ev, effTypes(effs))
		}
	}
	if !slices.Equal(s.conns, []Conn{c2}) || !reflect.DeepEqual(s.Header(), before) {
		t.Fatalf("a superseded conn changed the session: %+v", s.Header())
	}
	// Attaching the same conn again does not close it.
	effs = s.Step(t0.Add(3*time.Second), Attach{Conn: c2, UserID: "alice", LastSeq: 2})
	if len(only[CloseConn](effs)) != 0 {
		t.Fatalf("re-attach of the same conn closed it: %v", effTypes(effs))
	}
}

func TestSessionAttachRefusals(t *testing.T) {
	interrupted := func(h *record.Header) {
		h.Status, h.LastSeq, h.InterruptedAt, h.ExpiresAt = record.StatusInterrupted, 3, t0, t0.Add(testWindow)
	}
	now := t0.Add(time.Minute)
	cases := []struct {
		name   string
		hdr    func(*record.Header)
		ev     Attach
		reason string
		err    error
	}{
		{"other user", interrupted, Attach{UserID: "mallory"}, ReasonNotFound, nil},
		{"other user, sensitive", func(h *record.Header) { interrupted(h); h.Sensitive = true }, Attach{UserID: "mallory", AuthTime: now}, ReasonNotFound, nil},
		{"completed", func(h *record.Header) { h.Status = record.StatusCompleted }, Attach{UserID: "alice"}, ReasonCompleted, nil},
		{"expired", func(h *record.Header) { h.Status = record.StatusExpired }, Attach{UserID: "alice"}, ReasonExpired, nil},
		{"sensitive, no auth_time", func(h *record.Header) { interrupted(h); h.Sensitive = true }, Attach{UserID: "alice"}, "", ErrReauthRequired},
		{"sensitive, old auth_time", func(h *record.Header) { interrupted(h); h.Sensitive = true },
			Attach{UserID: "alice", AuthTime: now.Add(-testReauth - time.Second)}, "", ErrReauthRequired},
		{"last_seq beyond the log", interrupted, Attach{UserID: "alice", LastSeq: 4}, "", ErrBadLastSeq},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := baseHeader()
			tc.hdr(&h)
			s := machine(h, state{})
			before := s.Header()
			ev := tc.ev
			ev.Conn = &tconn{"c"}
			effs := s.Step(now, ev)
			wantTypes(t, "attach", effs, Answer{})
			res := effs[0].(Answer).Result
			if res.Reason != "" {
				t.Fatalf("a refusal carries reason %q", res.Reason)
			}
			if tc.reason != "" {
				if got := notResumedReason(res.Err); got != tc.reason {
					t.Fatalf("err = %v, want not resumed: %s", res.Err, tc.reason)
				}
			} else if !errors.Is(res.Err, tc.err) {
				t.Fatalf("err = %v, want %v", res.Err, tc.err)
			}
			if !reflect.DeepEqual(s.Header(), before) || len(s.conns) != 0 || s.nextID != 0 {
				t.Fatalf("a refused attach changed the session: %+v conn %v", s.Header(), s.conns)
			}
		})
	}
}

func TestSessionRefusalKeepsAttachedConn(t *testing.T) {
	s, c1 := newAttached(t)
	durable(s, t0, SetContext{Conn: c1, Set: map[string]any{"sensitive": true}})
	before := s.Header()
	for _, ev := range []Attach{
		{Conn: &tconn{"mallory"}, UserID: "mallory", AuthTime: t0},
		{Conn: &tconn{"stale"}, UserID: "alice"},
		{Conn: &tconn{"future"}, UserID: "alice", AuthTime: t0, LastSeq: 99},
	} {
		effs := s.Step(t0, ev)
		wantTypes(t, "refused attach", effs, Answer{})
		if !slices.Equal(s.conns, []Conn{c1}) || !reflect.DeepEqual(s.Header(), before) {
			t.Fatalf("refused attach by %v changed the session", ev.Conn)
		}
	}
}

func TestSessionAttachAfterWindow(t *testing.T) {
	for _, after := range []time.Duration{0, time.Hour} {
		s := interruptedAt(t, t0.Add(time.Minute))
		at := s.Header().ExpiresAt.Add(after)
		effs := s.Step(at, Attach{Conn: &tconn{"late"}, UserID: "alice", LastSeq: 2})
		// The refusal needs nothing durable; the stop waits for the expiry.
		wantTypes(t, "late attach", effs, CancelTurn{}, Append{}, Answer{})
		if got := notResumedReason(effs[2].(Answer).Result.Err); got != ReasonExpired {
			t.Fatalf("opened = %+v", effs[2])
		}
		if ap := effs[1].(Append); ap.Lazy || ap.Batch.Header.Status != record.StatusExpired {
			t.Fatalf("append = %+v", ap)
		}
		effs = s.Step(at, Appended{ID: effs[1].(Append).ID})
		wantTypes(t, "expiry durable", effs, Ended{}, Stop{})
		if st := effs[0].(Ended); st.Status != record.StatusExpired || st.UserID != "alice" {
			t.Fatalf("status = %+v", st)
		}
		if s.Header().Status != record.StatusExpired || len(s.conns) != 0 {
			t.Fatalf("status %s conn %v", s.Header().Status, s.conns)
		}
	}
}

func TestSessionSensitiveFreshLogin(t *testing.T) {
	h := baseHeader()
	h.Status, h.Sensitive, h.ExpiresAt = record.StatusInterrupted, true, t0.Add(testWindow)
	now := t0.Add(time.Minute)
	for _, age := range []time.Duration{0, time.Minute, testReauth} {
		s := machine(h, state{})
		effs := s.Step(now, Attach{Conn: &tconn{"c"}, UserID: "alice", AuthTime: now.Add(-age)})
		if o := one[Answer](t, effs); o.Result.Reason != ReasonResumed || o.Result.Err != nil {
			t.Fatalf("auth_time %v old: opened = %+v", age, o)
		}
		if !one[Deliver](t, effs).Out.(*SessionOut).Sensitive {
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
		if effs := s.Step(exp.Add(-time.Nanosecond), Tick{}); len(effs) != 0 {
			t.Fatalf("tick before expiry: %v", effTypes(effs))
		}
		effs := durable(s, exp, Tick{})
		wantTypes(t, "tick at expiry", effs, CancelTurn{}, Append{}, Ended{}, Stop{})
		if s.Header().Status != record.StatusExpired {
			t.Fatalf("status %s", s.Header().Status)
		}
	})
	t.Run("expiry abandons the turn", func(t *testing.T) {
		s, c := exchanged(t)
		durable(s, t0, Send{Conn: c, ID: "m2", Content: "q"})
		durable(s, t0, StepDone{Step: s.step, UserSeq: 3, Action: engine.Action{Call: &engine.Call{Name: "search"}}})
		durable(s, t1, Detach{Conn: c})
		effs := durable(s, s.Header().ExpiresAt, Tick{})
		ap := one[Append](t, effs)
		if len(ap.Batch.Entries) != 1 || machinetest.MetaString(ap.Batch.Entries[0], "status") != engine.ToolFailed ||
			ap.Batch.Entries[0].Content != "cancelled: session expired" {
			t.Fatalf("expiry appended %+v, want the call logged failed", ap.Batch.Entries)
		}
		if s.busy || s.st.Pending != nil || len(s.st.Turns) != 0 {
			t.Fatalf("expired with work: %+v busy %v", s.st, s.busy)
		}
	})
	t.Run("idle", func(t *testing.T) {
		s := interruptedAt(t, t1)
		if effs := s.Step(t1.Add(testIdle-time.Nanosecond), Tick{}); len(effs) != 0 {
			t.Fatalf("tick before idle: %v", effTypes(effs))
		}
		effs := s.Step(t1.Add(testIdle), Tick{})
		wantTypes(t, "idle tick", effs, Stop{})
		if s.Header().Status != record.StatusInterrupted {
			t.Fatalf("passivation changed the status to %s", s.Header().Status)
		}
	})
	t.Run("attached", func(t *testing.T) {
		s, _ := newAttached(t)
		if effs := s.Step(t0.Add(time.Hour), Tick{}); len(effs) != 0 {
			t.Fatalf("attached idle tick: %v", effTypes(effs))
		}
	})
	t.Run("turn in flight", func(t *testing.T) {
		s, c := newAttached(t)
		durable(s, t0, Send{Conn: c, ID: "m1", Content: "hi"})
		durable(s, t0, Detach{Conn: c})
		if effs := s.Step(t0.Add(2*testIdle), Tick{}); len(effs) != 0 {
			t.Fatalf("busy idle tick: %v", effTypes(effs))
		}
	})
	t.Run("append in flight", func(t *testing.T) {
		s, c := exchanged(t)
		s.Step(t1, Detach{Conn: c}) // its lazy append not answered yet
		if effs := s.Step(t1.Add(2*testIdle), Tick{}); len(effs) != 0 {
			t.Fatalf("tick with an append in flight: %v", effTypes(effs))
		}
	})
}

func TestSessionDeadline(t *testing.T) {
	t1 := t0.Add(10 * time.Second)
	cases := []struct {
		name string
		s    func(t *testing.T) *Machine
		want time.Time
	}{
		{"attached", func(t *testing.T) *Machine { s, _ := newAttached(t); return s }, time.Time{}},
		{"fresh, no conn", func(*testing.T) *Machine { return machine(baseHeader(), state{}) }, t0.Add(testIdle)},
		{"interrupted, idle first", func(t *testing.T) *Machine { return interruptedAt(t, t1) }, t1.Add(testIdle)},
		{"interrupted, window first", func(t *testing.T) *Machine {
			s := interruptedAt(t, t1)
			s.cfg.IdleTimeout = time.Hour
			return s
		}, t1.Add(testWindow)},
		{"interrupted, busy", func(t *testing.T) *Machine {
			s := interruptedAt(t, t1)
			s.busy = true
			return s
		}, t1.Add(testWindow)},
		{"interrupted, append in flight", func(t *testing.T) *Machine {
			s, c := exchanged(t)
			s.Step(t1, Detach{Conn: c})
			return s
		}, t1.Add(testWindow)},
		{"no idle timeout", func(*testing.T) *Machine {
			cfg := machineConfig()
			cfg.IdleTimeout = 0
			m, _ := New(cfg, Restore{Data: record.SessionData{Header: baseHeader()}}, t0)
			return m
		}, time.Time{}},
		{"busy, attached", func(t *testing.T) *Machine {
			s, c := newAttached(t)
			durable(s, t0, Send{Conn: c, ID: "m1", Content: "hi"})
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
	effs := s.Step(t0, HistoryRequest{Conn: c, Before: 7, Limit: 3})
	wantTypes(t, "history", effs, History{})
	if h := effs[0].(History); h.Conn != c || h.Before != 7 || h.Limit != 3 {
		t.Fatalf("history = %+v", h)
	}
	before := s.Header()
	effs = s.Step(t0, Shutdown{})
	wantTypes(t, "shutdown", effs, CancelTurn{}, CloseConn{}, Stop{})
	if cl := effs[1].(CloseConn); cl.Conn != c || cl.Why != CloseShutdown {
		t.Fatalf("close = %+v", cl)
	}
	// The next boot must find the session as it was: a shutdown is no
	// disconnect the machine records.
	if !reflect.DeepEqual(s.Header(), before) || s.nextID != 0 {
		t.Fatal("shutdown changed the session")
	}
}
