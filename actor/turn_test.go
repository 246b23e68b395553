package actor

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/wal"
)

func TestSessionSend(t *testing.T) {
	s, c := newAttached(t)
	md := map[string]any{"k": "v"}
	now := t0.Add(time.Second)
	effs := s.Step(evSend{conn: c, id: "m1", content: "hi", metadata: md, now: now})
	wantTypes(t, "send", effs, effAppend{}, effDeliver{}, effDeliver{}, effStep{})
	ap := effs[0].(effAppend)
	if len(ap.entries) != 1 {
		t.Fatalf("entries %v", ap.entries)
	}
	e := ap.entries[0]
	if e.Seq != 1 || e.Role != RoleUser || e.Content != "hi" || e.Time != unixSeconds(now) ||
		!reflect.DeepEqual(e.Metadata, map[string]any{"k": "v", "id": "m1"}) {
		t.Fatalf("entry = %+v", e)
	}
	if _, ok := md["id"]; ok {
		t.Fatal("send wrote into the caller's metadata map")
	}
	if !reflect.DeepEqual(ap.sends, map[string]uint64{"m1": 1}) {
		t.Fatalf("sends = %v", ap.sends)
	}
	if ap.meta.LastSeq != 1 || !slices.Equal(ap.meta.Turns, []uint64{1}) {
		t.Fatalf("meta last %d turns %v", ap.meta.LastSeq, ap.meta.Turns)
	}
	if d := effs[1].(effDeliver); d.conn != c || !reflect.DeepEqual(d.out, &AckOut{ID: "m1", Seq: 1}) {
		t.Fatalf("second effect = %+v, want the ack", d)
	}
	if d := effs[2].(effDeliver); d.conn != c || !reflect.DeepEqual(d.out, &EntryOut{Entry: e}) {
		t.Fatalf("third effect = %+v, want the entry", d)
	}
	if st := effs[3].(effStep); st.userSeq != 1 {
		t.Fatalf("step = %+v", st)
	}

	// A second send while the turn runs is queued, with no second step.
	effs = s.Step(evSend{conn: c, id: "m2", content: "more", now: now})
	wantTypes(t, "busy send", effs, effAppend{}, effDeliver{}, effDeliver{})
	if ap := effs[0].(effAppend); ap.entries[0].Seq != 2 || ap.sends["m2"] != 2 {
		t.Fatalf("second send: %+v", ap)
	}
	if !slices.Equal(s.Meta().Turns, []uint64{1, 2}) {
		t.Fatalf("turns = %v", s.Meta().Turns)
	}

	// A send id the actor found in the log: only the first ack again.
	before := deepMeta(s.Meta())
	effs = s.Step(evSend{conn: c, id: "m1", content: "hi again", prevSeq: 1, now: now})
	wantTypes(t, "repeat send", effs, effDeliver{})
	if d := effs[0].(effDeliver); !reflect.DeepEqual(d.out, &AckOut{ID: "m1", Seq: 1}) {
		t.Fatalf("repeat ack = %+v", d.out)
	}
	if !reflect.DeepEqual(s.Meta(), before) {
		t.Fatal("a repeated send changed the session")
	}
}

func TestSessionActionReply(t *testing.T) {
	s, c := newAttached(t)
	s.Step(evSend{conn: c, id: "m1", content: "one", now: t0})
	s.Step(evSend{conn: c, id: "m2", content: "two", now: t0})

	effs := s.Step(evAction{userSeq: 1, action: Action{Reply: "r1", AgentContext: map[string]any{"x": 1}}, now: t0})
	wantTypes(t, "reply", effs, effAppend{}, effDeliver{}, effStep{})
	e := effs[0].(effAppend).entries[0]
	if e.Seq != 3 || e.Role != RoleAgent || e.Content != "r1" || e.Metadata["reply_to"] != uint64(1) {
		t.Fatalf("reply entry = %+v", e)
	}
	if d := effs[1].(effDeliver); d.conn != c || d.out.(*EntryOut).Entry.Seq != 3 {
		t.Fatalf("deliver = %+v", d)
	}
	if st := effs[2].(effStep); st.userSeq != 2 {
		t.Fatalf("next step = %+v", st)
	}
	if m := s.Meta(); !slices.Equal(m.Turns, []uint64{2}) || m.AgentContext["x"] != 1 {
		t.Fatalf("turns %v agent context %v", m.Turns, m.AgentContext)
	}

	// A stale answer for the finished turn is dropped.
	if effs := s.Step(evAction{userSeq: 1, action: Action{Reply: "late"}, now: t0}); len(effs) != 0 {
		t.Fatalf("stale action: %v", effTypes(effs))
	}

	effs = s.Step(evAction{userSeq: 2, err: errors.New("model down"), now: t0})
	wantTypes(t, "error reply", effs, effAppend{}, effDeliver{})
	e = effs[0].(effAppend).entries[0]
	if e.Seq != 4 || e.Role != RoleSystem || e.Content != "agent error: model down" || e.Metadata["reply_to"] != uint64(2) {
		t.Fatalf("error entry = %+v", e)
	}
	if s.busy || len(s.Meta().Turns) != 0 {
		t.Fatalf("busy %v turns %v after the last turn", s.busy, s.Meta().Turns)
	}
}

func TestSessionToolCall(t *testing.T) {
	s, c := newAttached(t)
	s.Step(evSend{conn: c, id: "m1", content: "find laptops", now: t0})
	args := map[string]any{"query": "laptops"}
	effs := s.Step(evAction{userSeq: 1, action: Action{Call: &Call{Name: "search", Args: args}}, now: t0})
	wantTypes(t, "call", effs, effAppend{}, effDeliver{}, effRunTool{})
	e := effs[0].(effAppend).entries[0]
	wantMD := map[string]any{"call_id": "call-2", "name": "search", "status": ToolStarted, "reply_to": uint64(1), "args": args}
	if e.Seq != 2 || e.Role != RoleTool || !reflect.DeepEqual(e.Metadata, wantMD) {
		t.Fatalf("started entry = %+v", e)
	}
	call := effs[2].(effRunTool).call
	wantCall := wal.ToolCall{CallID: "call-2", Name: "search", Args: args, Status: ToolStarted, StartedSeq: 2, ReplyTo: 1}
	if !reflect.DeepEqual(call, wantCall) {
		t.Fatalf("run tool = %+v, want %+v", call, wantCall)
	}
	if p := effs[0].(effAppend).meta.Pending; p == nil || !reflect.DeepEqual(*p, wantCall) {
		t.Fatalf("pending in the appended meta = %+v", p)
	}
	if s.Meta().Sensitive {
		t.Fatal("a plain tool marked the session sensitive")
	}
	// While the tool runs the engine cannot answer the turn.
	if effs := s.Step(evAction{userSeq: 1, action: Action{Reply: "too early"}, now: t0}); len(effs) != 0 {
		t.Fatalf("action during a tool run: %v", effTypes(effs))
	}

	effs = s.Step(evToolProgress{callID: "call-2", partial: "1 of 3", now: t0})
	wantTypes(t, "progress", effs, effAppend{})
	if ap := effs[0].(effAppend); len(ap.entries) != 0 || ap.meta.Pending.Partial != "1 of 3" {
		t.Fatalf("progress append = %+v", ap)
	}
	if effs := s.Step(evToolProgress{callID: "call-9", partial: "x", now: t0}); len(effs) != 0 {
		t.Fatalf("progress of another call: %v", effTypes(effs))
	}
	if effs := s.Step(evToolDone{callID: "call-9", result: "x", now: t0}); len(effs) != 0 {
		t.Fatalf("result of another call: %v", effTypes(effs))
	}

	effs = s.Step(evToolDone{callID: "call-2", result: "3 results", now: t0})
	wantTypes(t, "tool done", effs, effAppend{}, effDeliver{}, effStep{})
	e = effs[0].(effAppend).entries[0]
	if e.Seq != 3 || e.Role != RoleTool || e.Content != "3 results" || mdString(e, "status") != ToolCompleted ||
		mdString(e, "result") != "3 results" || mdString(e, "call_id") != "call-2" || e.Metadata["reply_to"] != uint64(1) {
		t.Fatalf("completed entry = %+v", e)
	}
	if effs[0].(effAppend).meta.Pending != nil || s.Meta().Pending != nil {
		t.Fatal("pending not cleared")
	}
	if st := effs[2].(effStep); st.userSeq != 1 {
		t.Fatalf("step = %+v", st)
	}
	if effs := s.Step(evToolDone{callID: "call-2", result: "again", now: t0}); len(effs) != 0 {
		t.Fatalf("second result: %v", effTypes(effs))
	}
	effs = s.Step(evAction{userSeq: 1, action: Action{Reply: "done"}, now: t0})
	wantTypes(t, "reply", effs, effAppend{}, effDeliver{})
}

func TestSessionToolFailed(t *testing.T) {
	s, c := newAttached(t)
	s.Step(evSend{conn: c, id: "m1", content: "q", now: t0})
	s.Step(evAction{userSeq: 1, action: Action{Call: &Call{Name: "search"}}, now: t0})
	effs := s.Step(evToolDone{callID: "call-2", err: errors.New("boom"), now: t0})
	wantTypes(t, "tool failed", effs, effAppend{}, effDeliver{}, effStep{})
	e := effs[0].(effAppend).entries[0]
	if mdString(e, "status") != ToolFailed || e.Content != "boom" || mdString(e, "result") != "boom" {
		t.Fatalf("failed entry = %+v", e)
	}
}

func TestSessionSensitiveTool(t *testing.T) {
	s, c := newAttached(t)
	s.Step(evSend{conn: c, id: "m1", content: "pay rent", now: t0})
	effs := s.Step(evAction{userSeq: 1, action: Action{Call: &Call{Name: "payment"}}, now: t0})
	if !one[effAppend](t, effs).meta.Sensitive || !s.Meta().Sensitive {
		t.Fatal("a sensitive tool did not mark the session sensitive before running")
	}
	if index[effAppend](effs) > index[effRunTool](effs) {
		t.Fatal("the tool runs before the mark is durable")
	}
}

func TestSessionContext(t *testing.T) {
	s, c := newAttached(t)
	step := func(set map[string]any, want map[string]any, sensitive bool) {
		t.Helper()
		effs := s.Step(evContext{conn: c, set: set, now: t0})
		wantTypes(t, "context", effs, effAppend{}, effDeliver{})
		ap := effs[0].(effAppend)
		d := effs[1].(effDeliver)
		got := d.out.(*ContextOut).Context
		if d.conn != c || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(ap.meta.Context, want) {
			t.Fatalf("set %v: out %v, appended %v, want %v", set, got, ap.meta.Context, want)
		}
		if s.Meta().Sensitive != sensitive || ap.meta.Sensitive != sensitive {
			t.Fatalf("set %v: sensitive %v, want %v", set, s.Meta().Sensitive, sensitive)
		}
	}
	step(map[string]any{"goal": "compare laptops", "lang": "zh"}, map[string]any{"goal": "compare laptops", "lang": "zh"}, false)
	step(map[string]any{"lang": nil, "budget": 900}, map[string]any{"goal": "compare laptops", "budget": 900}, false)
	step(map[string]any{"sensitive": false}, map[string]any{"goal": "compare laptops", "budget": 900, "sensitive": false}, false)
	step(map[string]any{"sensitive": true}, map[string]any{"goal": "compare laptops", "budget": 900, "sensitive": true}, true)
	step(map[string]any{"sensitive": false}, map[string]any{"goal": "compare laptops", "budget": 900, "sensitive": true}, true)
	step(map[string]any{"sensitive": nil, "goal": nil}, map[string]any{"budget": 900, "sensitive": true}, true)

	// The ContextOut is a copy: later changes do not reach a frame already
	// handed to the connection.
	effs := s.Step(evContext{conn: c, set: map[string]any{"a": 1}, now: t0})
	out := effs[1].(effDeliver).out.(*ContextOut)
	s.Step(evContext{conn: c, set: map[string]any{"b": 2}, now: t0})
	if _, ok := out.Context["b"]; ok {
		t.Fatal("ContextOut shares the session's map")
	}
}

func TestSessionComplete(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		s, c := newAttached(t)
		effs := s.Step(evComplete{conn: c, now: t0})
		wantTypes(t, "complete", effs, effCancelTurn{}, effAppend{}, effDeliver{}, effClose{}, effStop{})
		if ap := effs[1].(effAppend); len(ap.entries) != 0 || ap.meta.Status != wal.StatusCompleted {
			t.Fatalf("append = %+v", ap)
		}
		if d := effs[2].(effDeliver); d.conn != c || !reflect.DeepEqual(d.out, &CompletedOut{SessionID: "s1"}) {
			t.Fatalf("deliver = %+v", d)
		}
		if cl := effs[3].(effClose); cl.conn != c || cl.code != CloseNormal {
			t.Fatalf("close = %+v", cl)
		}
		if s.Meta().Status != wal.StatusCompleted || s.conn != nil {
			t.Fatal("not completed")
		}
	})
	t.Run("pending tool", func(t *testing.T) {
		s, c := newAttached(t)
		s.Step(evSend{conn: c, id: "m1", content: "q", now: t0})
		s.Step(evSend{conn: c, id: "m2", content: "q2", now: t0})
		s.Step(evAction{userSeq: 1, action: Action{Call: &Call{Name: "search"}}, now: t0})
		effs := s.Step(evComplete{conn: c, now: t0})
		// The abandoned call's entry reaches the client before completed.
		wantTypes(t, "complete", effs, effCancelTurn{}, effAppend{}, effDeliver{}, effDeliver{}, effClose{}, effStop{})
		ap := effs[1].(effAppend)
		if len(ap.entries) != 1 {
			t.Fatalf("entries %+v", ap.entries)
		}
		if d := effs[2].(effDeliver); d.conn != c || !reflect.DeepEqual(d.out, &EntryOut{Entry: ap.entries[0]}) {
			t.Fatalf("first deliver = %+v, want the abandoned call's entry", d)
		}
		if d := effs[3].(effDeliver); !reflect.DeepEqual(d.out, &CompletedOut{SessionID: "s1"}) {
			t.Fatalf("second deliver = %+v", d)
		}
		e := ap.entries[0]
		if e.Seq != 4 || e.Role != RoleTool || mdString(e, "status") != ToolFailed || mdString(e, "call_id") != "call-3" {
			t.Fatalf("abandoned call entry = %+v", e)
		}
		if ap.meta.Pending != nil || len(ap.meta.Turns) != 0 || ap.meta.Status != wal.StatusCompleted || ap.meta.LastSeq != 4 {
			t.Fatalf("meta = %+v", ap.meta)
		}
		// The tool's late result and the engine's late answer are dropped.
		if effs := s.Step(evToolDone{callID: "call-3", result: "x", now: t0}); len(effs) != 0 {
			t.Fatalf("late tool result: %v", effTypes(effs))
		}
		if effs := s.Step(evAction{userSeq: 1, action: Action{Reply: "x"}, now: t0}); len(effs) != 0 {
			t.Fatalf("late action: %v", effTypes(effs))
		}
	})
}

func TestSessionShutdownAndHistory(t *testing.T) {
	s, c := newAttached(t)
	effs := s.Step(evHistory{conn: c, before: 7, limit: 3, now: t0})
	wantTypes(t, "history", effs, effHistory{})
	if h := effs[0].(effHistory); h.conn != c || h.before != 7 || h.limit != 3 {
		t.Fatalf("history = %+v", h)
	}
	before := deepMeta(s.Meta())
	effs = s.Step(evShutdown{})
	wantTypes(t, "shutdown", effs, effClose{}, effCancelTurn{}, effStop{})
	if cl := effs[0].(effClose); cl.conn != c || cl.code != CloseRestarting {
		t.Fatalf("close = %+v", cl)
	}
	if !reflect.DeepEqual(s.Meta(), before) {
		t.Fatal("shutdown changed the metadata: the next boot must see the session as it was")
	}
}

// pendingMeta is a session a crash left with call-2 of tool started for
// user entry 1.
func pendingMeta(tool string, attempts int) wal.Meta {
	m := baseMeta()
	m.Status = wal.StatusInterrupted
	m.ExpiresAt = t0.Add(testWindow)
	m.LastSeq = 2
	m.Turns = []uint64{1}
	m.Pending = &wal.ToolCall{CallID: "call-2", Name: tool, Status: ToolStarted, StartedSeq: 2, ReplyTo: 1, Attempts: attempts}
	return m
}

func TestSessionStartPendingNotIdempotent(t *testing.T) {
	s := newSession(machineConfig(), pendingMeta("search", 0), t0)
	effs := s.Step(evStart{now: t0})
	wantTypes(t, "start", effs, effAppend{}, effStep{})
	ap := effs[0].(effAppend)
	if len(ap.entries) != 1 {
		t.Fatalf("entries %+v", ap.entries)
	}
	e := ap.entries[0]
	if e.Seq != 3 || e.Role != RoleTool || e.Content != interrupted || mdString(e, "status") != ToolFailed ||
		mdString(e, "result") != interrupted || mdString(e, "call_id") != "call-2" || e.Metadata["reply_to"] != uint64(1) {
		t.Fatalf("failed entry = %+v", e)
	}
	if ap.meta.Pending != nil || ap.meta.LastSeq != 3 {
		t.Fatalf("meta = %+v", ap.meta)
	}
	if st := effs[1].(effStep); st.userSeq != 1 {
		t.Fatalf("step = %+v", st)
	}
}

func TestSessionStartPendingIdempotent(t *testing.T) {
	s := newSession(machineConfig(), pendingMeta("isearch", 0), t0)
	effs := s.Step(evStart{now: t0})
	wantTypes(t, "start", effs, effAppend{}, effRunTool{})
	ap := effs[0].(effAppend)
	if len(ap.entries) != 0 || ap.meta.Pending == nil || ap.meta.Pending.Attempts != 1 {
		t.Fatalf("the attempt must be durable before the run: %+v", ap)
	}
	if call := effs[1].(effRunTool).call; call.CallID != "call-2" || call.Attempts != 1 {
		t.Fatalf("run = %+v", call)
	}
	if !s.busy {
		t.Fatal("not busy while the tool runs")
	}

	// With two attempts recorded the call is given up as failed.
	s = newSession(machineConfig(), pendingMeta("isearch", 2), t0)
	effs = s.Step(evStart{now: t0})
	wantTypes(t, "start after two attempts", effs, effAppend{}, effStep{})
	if e := effs[0].(effAppend).entries[0]; mdString(e, "status") != ToolFailed || e.Content != interrupted {
		t.Fatalf("entry = %+v", e)
	}
}

// TestSessionIdempotentToolNotRunThrice follows one idempotent call through
// successive crashes, each boot starting a machine from what the previous
// one made durable. start's own comment promises that the durable attempt
// count makes sure "a second crash does not make a third" run; DESIGN.md
// says a call cut short by a crash is re-run (once) when idempotent.
//
// It fails today: start retries while Attempts < 2, so the original run
// plus two re-runs make three.
func TestSessionIdempotentToolNotRunThrice(t *testing.T) {
	m := pendingMeta("isearch", 0) // run 1 was cut short by crash 1
	runs := 1
	for boot := 1; boot <= 4; boot++ {
		s := newSession(machineConfig(), deepMeta(m), t0)
		effs := s.Step(evStart{now: t0})
		ran := len(only[effRunTool](effs)) > 0
		for _, ap := range only[effAppend](effs) {
			m = deepMeta(ap.meta)
		}
		if !ran {
			if m.Pending != nil {
				t.Fatalf("boot %d neither ran nor failed the call", boot)
			}
			break
		}
		runs++ // ... and the node crashes again during this run
	}
	if runs > 2 {
		t.Fatalf("an idempotent call ran %d times across crashes; a second crash must not make a third run", runs)
	}
}

func TestSessionStartOther(t *testing.T) {
	m := baseMeta()
	m.LastSeq, m.Turns = 3, []uint64{1, 3}
	s := newSession(machineConfig(), m, t0)
	effs := s.Step(evStart{now: t0})
	wantTypes(t, "owed turns", effs, effStep{})
	if effs[0].(effStep).userSeq != 1 {
		t.Fatalf("step = %+v", effs[0])
	}

	if effs := newSession(machineConfig(), baseMeta(), t0).Step(evStart{now: t0}); len(effs) != 0 {
		t.Fatalf("nothing to do: %v", effTypes(effs))
	}
	for _, st := range []wal.Status{wal.StatusCompleted, wal.StatusExpired} {
		m := pendingMeta("search", 0)
		m.Status = st
		if effs := newSession(machineConfig(), m, t0).Step(evStart{now: t0}); len(effs) != 0 {
			t.Fatalf("%s session started work: %v", st, effTypes(effs))
		}
	}
}

func TestSessionRecoverAt(t *testing.T) {
	boot := t0.Add(time.Hour)
	t.Run("active", func(t *testing.T) {
		s := newSession(machineConfig(), baseMeta(), boot)
		effs := s.recoverAt(boot, boot.Add(-time.Minute))
		wantTypes(t, "recover", effs, effAppend{})
		m := s.Meta()
		if m.Status != wal.StatusInterrupted || !m.InterruptedAt.Equal(boot) || !m.ExpiresAt.Equal(boot.Add(testWindow)) {
			t.Fatalf("meta = %+v", m)
		}
		if !sameMeta(effs[0].(effAppend).meta, m) {
			t.Fatal("appended meta differs")
		}
	})
	t.Run("interrupted, window ended before the stop", func(t *testing.T) {
		for _, lastAlive := range []time.Duration{0, time.Second} {
			m := pendingMeta("search", 0)
			m.ExpiresAt = t0.Add(10 * time.Minute)
			s := newSession(machineConfig(), m, boot)
			effs := s.recoverAt(boot, m.ExpiresAt.Add(lastAlive))
			ap := one[effAppend](t, effs)
			if s.Meta().Status != wal.StatusExpired || ap.meta.Status != wal.StatusExpired {
				t.Fatalf("status %s", s.Meta().Status)
			}
			// The call it had in flight gets an outcome.
			if len(ap.entries) != 1 || mdString(ap.entries[0], "status") != ToolFailed || ap.meta.Pending != nil {
				t.Fatalf("entries %+v", ap.entries)
			}
			if s.hasWork() {
				t.Fatal("an expired session has work")
			}
		}
	})
	t.Run("interrupted, window still open", func(t *testing.T) {
		m := baseMeta()
		m.Status = wal.StatusInterrupted
		m.InterruptedAt = t0
		m.ExpiresAt = t0.Add(10 * time.Minute)
		lastAlive := t0.Add(8 * time.Minute)
		boot := t0.Add(20 * time.Minute)
		s := newSession(machineConfig(), m, boot)
		effs := s.recoverAt(boot, lastAlive)
		wantTypes(t, "recover", effs, effAppend{})
		want := m.ExpiresAt.Add(boot.Sub(lastAlive))
		if got := s.Meta().ExpiresAt; !got.Equal(want) || s.Meta().Status != wal.StatusInterrupted {
			t.Fatalf("expires %v status %s, want %v interrupted", got, s.Meta().Status, want)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		for _, st := range []wal.Status{wal.StatusCompleted, wal.StatusExpired} {
			m := baseMeta()
			m.Status = st
			s := newSession(machineConfig(), m, boot)
			if effs := s.recoverAt(boot, boot); len(effs) != 0 {
				t.Fatalf("%s: %v", st, effTypes(effs))
			}
		}
	})
}
