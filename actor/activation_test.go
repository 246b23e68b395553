package actor

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/wal"
)

func TestRegistryPassivation(t *testing.T) {
	r, _, _ := setup(t, Config{IdleTimeout: 50 * time.Millisecond})
	c := newRecConn("c1")
	h := openNew(t, r, "alice", c)
	chat(t, h, c, "m1", "hello")
	if r.Stats().Active != 1 {
		t.Fatalf("stats = %+v", r.Stats())
	}
	h.Detach()
	eventually(t, "the actor passivates", func() bool { return r.Stats().Active == 0 })
	if st := r.Stats(); st.Passivations != 1 || st.Activations != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if s := snapshot(t, r, h.SessionID, "alice"); s.Meta.Status != wal.StatusInterrupted {
		t.Fatalf("passivated status %s", s.Meta.Status)
	}

	// Resume activates it again from the log and replays.
	c2 := newRecConn("c2")
	h2 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 0, Conn: c2})
	if h2.Reason != ReasonResumed {
		t.Fatalf("resume = %+v", h2)
	}
	if so := expect[*SessionOut](t, c2); so.LastSeq != 2 {
		t.Fatalf("session frame = %+v", so)
	}
	b := expect[*BatchOut](t, c2)
	if !reflect.DeepEqual(seqsOf(b.Messages), []uint64{1, 2}) || b.Messages[1].Content != "Agent reply: hello" {
		t.Fatalf("batch = %+v", b)
	}
	if seq := chat(t, h2, c2, "m2", "back"); seq != 3 {
		t.Fatalf("seq after reactivation %d", seq)
	}
	if st := r.Stats(); st.Activations != 2 || st.Active != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestRegistryDemoDetachDuringTool(t *testing.T) {
	demo := NewDemo(DemoConfig{SearchDelay: 100 * time.Millisecond})
	r, _, _ := setup(t, Config{Engine: demo})
	c1 := newRecConn("c1")
	h := openNew(t, r, "alice", c1)
	if err := h.Send(t.Context(), "m1", "laptops", nil); err != nil {
		t.Fatal(err)
	}
	if ack := expect[*AckOut](t, c1); ack.Seq != 1 {
		t.Fatalf("ack = %+v", ack)
	}
	h.Detach() // the train enters a tunnel while the search runs

	s := waitEntry(t, r, h.SessionID, "alice", "the agent reply is logged", isAgent)
	if s.Meta.Status != wal.StatusInterrupted || s.Meta.Pending != nil || len(s.Meta.Turns) != 0 {
		t.Fatalf("after the turn: %+v", s.Meta)
	}
	for _, o := range c1.all() {
		if e, ok := o.(*EntryOut); ok && e.Entry.Seq >= 3 {
			t.Fatalf("the detached conn got entry %d", e.Entry.Seq)
		}
	}

	c2 := newRecConn("c2")
	h2 := open(t, r, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 1, Conn: c2})
	if h2.Reason != ReasonResumed {
		t.Fatalf("resume = %+v", h2)
	}
	if so := expect[*SessionOut](t, c2); so.LastSeq != 4 || so.Pending != nil {
		t.Fatalf("session frame = %+v", so)
	}
	b := expect[*BatchOut](t, c2)
	if !reflect.DeepEqual(seqsOf(b.Messages), []uint64{2, 3, 4}) {
		t.Fatalf("batch seqs %v", seqsOf(b.Messages))
	}
	started, done, reply := b.Messages[0], b.Messages[1], b.Messages[2]
	if !isTool(ToolStarted)(started) || mdString(started, "name") != "search" {
		t.Fatalf("started = %+v", started)
	}
	if !isTool(ToolCompleted)(done) || mdString(done, "call_id") != mdString(started, "call_id") ||
		done.Content != `Found 3 results for "laptops".` {
		t.Fatalf("completed = %+v", done)
	}
	if reply.Role != RoleAgent || !strings.Contains(reply.Content, done.Content) || AsUint(reply.Metadata["reply_to"]) != 1 {
		t.Fatalf("reply = %+v", reply)
	}
	if n := demo.Runs("search"); n != 1 {
		t.Fatalf("search ran %d times", n)
	}
}

// startSearchThenStop opens a session on a Demo engine whose search takes
// long, sends a message, waits until the tool is logged as started, and
// stops registry and log as a node stop would. It returns the session id.
func startSearchThenStop(t *testing.T, dir string, demo *Demo) string {
	t.Helper()
	l := openLog(t, dir)
	r := newRegistry(t, l, Config{Engine: demo})
	c := newRecConn("c1")
	h := openNew(t, r, "alice", c)
	if err := h.Send(t.Context(), "m1", "laptops", nil); err != nil {
		t.Fatal(err)
	}
	s := waitEntry(t, r, h.SessionID, "alice", "the tool is started", isTool(ToolStarted))
	if s.Meta.Pending == nil {
		t.Fatal("started without a pending call")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if codes := c.closeCodes(); !reflect.DeepEqual(codes, []int{CloseRestarting}) {
		t.Fatalf("close codes at shutdown %v", codes)
	}
	if n := demo.Runs("search"); n != 1 {
		t.Fatalf("search ran %d times before the stop", n)
	}
	return h.SessionID
}

func TestRegistryRestartInterruptsNonIdempotentTool(t *testing.T) {
	dir := t.TempDir()
	sid := startSearchThenStop(t, dir, NewDemo(DemoConfig{SearchDelay: 10 * time.Second}))

	demo := NewDemo(DemoConfig{SearchDelay: 30 * time.Millisecond})
	r := newRegistry(t, openLog(t, dir), Config{Engine: demo})
	s := waitEntry(t, r, sid, "alice", "the agent answers after the restart", isAgent)
	msgs := s.Messages
	if !reflect.DeepEqual(seqsOf(msgs), span(1, 4)) {
		t.Fatalf("log seqs %v", seqsOf(msgs))
	}
	failed := msgs[2]
	if !isTool(ToolFailed)(failed) || failed.Content != "interrupted" || mdString(failed, "call_id") != mdString(msgs[1], "call_id") {
		t.Fatalf("entry 3 = %+v, want the call failed as interrupted", failed)
	}
	if msgs[3].Role != RoleAgent || AsUint(msgs[3].Metadata["reply_to"]) != 1 {
		t.Fatalf("entry 4 = %+v", msgs[3])
	}
	if n := demo.Runs("search"); n != 0 {
		t.Fatalf("a non-idempotent search ran %d times after the restart", n)
	}
	if s.Meta.Pending != nil || s.Meta.Status != wal.StatusInterrupted {
		t.Fatalf("meta = %+v", s.Meta)
	}
}

func TestRegistryRestartRerunsIdempotentTool(t *testing.T) {
	dir := t.TempDir()
	sid := startSearchThenStop(t, dir, NewDemo(DemoConfig{SearchDelay: 10 * time.Second, SearchIdempotent: true}))

	demo := NewDemo(DemoConfig{SearchDelay: 30 * time.Millisecond, SearchIdempotent: true})
	r := newRegistry(t, openLog(t, dir), Config{Engine: demo})
	s := waitEntry(t, r, sid, "alice", "the agent answers after the restart", isAgent)
	msgs := s.Messages
	if !reflect.DeepEqual(seqsOf(msgs), span(1, 4)) {
		t.Fatalf("log seqs %v", seqsOf(msgs))
	}
	done := msgs[2]
	if !isTool(ToolCompleted)(done) || done.Content != `Found 3 results for "laptops".` || mdString(done, "call_id") != mdString(msgs[1], "call_id") {
		t.Fatalf("entry 3 = %+v, want the re-run's result", done)
	}
	if msgs[3].Role != RoleAgent || !strings.Contains(msgs[3].Content, done.Content) {
		t.Fatalf("entry 4 = %+v", msgs[3])
	}
	if n := demo.Runs("search"); n != 1 {
		t.Fatalf("the idempotent search ran %d times after the restart, want 1", n)
	}
	if s.Meta.Pending != nil || len(s.Meta.Turns) != 0 {
		t.Fatalf("meta = %+v", s.Meta)
	}
}

func TestRegistryRestartActiveBecomesInterrupted(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	r := newRegistry(t, l, Config{})
	c := newRecConn("c1")
	h := openNew(t, r, "alice", c)
	chat(t, h, c, "m1", "hello")
	stop := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	c.waitClosed(t, CloseRestarting)
	h.Detach() // after shutdown: must return, and change nothing

	r2 := newRegistry(t, openLog(t, dir), Config{})
	s := snapshot(t, r2, h.SessionID, "alice")
	if s.Meta.Status != wal.StatusInterrupted || s.Meta.ExpiresAt.Before(stop.Add(5*time.Minute)) {
		t.Fatalf("after restart: status %s expires %v", s.Meta.Status, s.Meta.ExpiresAt)
	}
	c2 := newRecConn("c2")
	h2 := open(t, r2, OpenRequest{SessionID: h.SessionID, UserID: "alice", LastSeq: 1, Conn: c2})
	if h2.Reason != ReasonResumed {
		t.Fatalf("resume after restart = %+v", h2)
	}
	expect[*SessionOut](t, c2)
	if b := expect[*BatchOut](t, c2); !reflect.DeepEqual(seqsOf(b.Messages), []uint64{2}) {
		t.Fatalf("batch = %v", seqsOf(b.Messages))
	}
	if seq := chat(t, h2, c2, "m2", "after restart"); seq != 3 {
		t.Fatalf("seq after restart %d", seq)
	}
}

func TestRegistryRestartWindows(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock(time.Now())
	l := openLog(t, dir)
	r := newRegistry(t, l, Config{Now: clock.Now})

	// "early" is detached 6 minutes before the stop: its window ended
	// while the node ran. "late" is detached one minute before the stop.
	ce, cl := newRecConn("early"), newRecConn("late")
	early := openNew(t, r, "alice", ce)
	chat(t, early, ce, "m1", "early")
	early.Detach()
	waitStatus(t, r, early.SessionID, "alice", wal.StatusInterrupted)
	clock.Advance(5 * time.Minute)
	late := openNew(t, r, "alice", cl)
	chat(t, late, cl, "m1", "late")
	late.Detach()
	lateMeta := waitStatus(t, r, late.SessionID, "alice", wal.StatusInterrupted).Meta
	clock.Advance(time.Minute)
	stop := clock.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Down for an hour.
	clock.Advance(time.Hour)
	r2 := newRegistry(t, openLog(t, dir), Config{Now: clock.Now})
	if s := snapshot(t, r2, early.SessionID, "alice"); s.Meta.Status != wal.StatusExpired {
		t.Fatalf("early: status %s, want expired", s.Meta.Status)
	}
	s := snapshot(t, r2, late.SessionID, "alice")
	want := lateMeta.ExpiresAt.Add(clock.Now().Sub(stop))
	if s.Meta.Status != wal.StatusInterrupted || !s.Meta.ExpiresAt.Equal(want) {
		t.Fatalf("late: status %s expires %v, want interrupted until %v", s.Meta.Status, s.Meta.ExpiresAt, want)
	}
	c := newRecConn("c")
	if h := open(t, r2, OpenRequest{SessionID: late.SessionID, UserID: "alice", LastSeq: 2, Conn: c}); h.Reason != ReasonResumed {
		t.Fatalf("late resume = %+v", h)
	}
	c2 := newRecConn("c2")
	if h := open(t, r2, OpenRequest{SessionID: early.SessionID, UserID: "alice", LastSeq: 2, Conn: c2}); h.Reason != ReasonExpired {
		t.Fatalf("early resume = %+v", h)
	}
}
