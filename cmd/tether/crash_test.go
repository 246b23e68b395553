package main

// Crash and restart tests against the real binary: SIGKILL keeps every
// acked entry, sessions alive at a crash stay resumable, SIGTERM hands
// clients a 1012, and a tool call cut short by a crash never runs twice
// (or, when idempotent, runs again exactly once).

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestCrashKeepsAckedEntries(t *testing.T) {
	t.Parallel()
	const (
		n      = 200
		killAt = 100 // acks before the kill
	)
	id := func(i int) string { return fmt.Sprintf("c-%03d", i) }
	content := func(i int) string { return fmt.Sprintf("message %03d, crash or not", i) }

	p := startServe(t, t.TempDir(), "--rate", "0", "--max-turns", "1000")
	tok := token(t, "alice")
	c := dial(t, p.wsURL())
	s := c.hello(tok, "", 0)
	if s.Resumed || s.Reason != "new" || s.LastSeq != 0 {
		t.Fatalf("new session frame: %s", s.Raw)
	}
	sid := s.SessionID

	// One goroutine keeps sending while this one counts acks and kills the
	// node once killAt of them came back: sends are still in flight.
	sent := make(chan int, 1)
	go func() {
		k := 0
		for i := range n {
			if c.Write(sendFrame(id(i), content(i))) != nil {
				break
			}
			k++
		}
		sent <- k
	}()
	acked := make(map[string]uint64) // id → seq
	var lastAck uint64
	killed := false
	deadline := time.After(30 * time.Second)
read:
	for {
		select {
		case f, ok := <-c.Frames():
			if !ok {
				break read
			}
			switch f.Type {
			case "ack":
				if _, dup := acked[f.ID]; dup {
					t.Errorf("second ack for %s before any resend", f.ID)
				}
				if f.Seq <= lastAck {
					t.Errorf("ack %s seq %d after ack seq %d", f.ID, f.Seq, lastAck)
				}
				lastAck = f.Seq
				acked[f.ID] = f.Seq
				if len(acked) == killAt && !killed {
					p.kill9()
					killed = true
				}
			case "error":
				t.Errorf("error frame: %s", f.Raw)
			}
		case <-deadline:
			t.Fatalf("connection still open 30s in; %d acks, killed=%v", len(acked), killed)
		}
	}
	if !killed {
		t.Fatalf("connection ended after %d acks, before the kill: %v", len(acked), c.Err())
	}
	t.Logf("%d sends written, %d acked before the SIGKILL", <-sent, len(acked))
	if len(acked) == n {
		t.Logf("every send was acked before the kill landed: nothing was in flight")
	}

	p2 := p.restart("--rate", "0", "--max-turns", "1000")
	if code, snap := p2.snapshot(sid, tok); code != http.StatusOK || snap.Status != "interrupted" {
		t.Fatalf("after restart: HTTP %d status %q, want 200 interrupted", code, snap.Status)
	}
	c2 := dial(t, p2.wsURL())
	s2 := c2.hello(tok, sid, 0)
	if !s2.Resumed || s2.Reason != "resumed" || s2.Status != "active" || s2.SessionID != sid {
		t.Fatalf("resume after crash: %s", s2.Raw)
	}
	if s2.LastSeq < lastAck {
		t.Fatalf("resumed last_seq %d < newest acked seq %d: acked entries lost", s2.LastSeq, lastAck)
	}
	l := newEntryLog(t)
	batch := c2.until(10*time.Second, "resume history_batch", l.observe, func(f frame) bool { return f.Type == "history_batch" })
	if len(batch.Messages) > 50 {
		t.Errorf("resume batch holds %d entries, replay limit is 50", len(batch.Messages))
	}
	if batch.LastSeq != s2.LastSeq {
		t.Errorf("resume batch ends at %d, session last_seq %d", batch.LastSeq, s2.LastSeq)
	}
	if s2.LastSeq > 50 {
		if batch.Omitted != s2.LastSeq-50 || batch.Summary == nil || batch.FirstSeq != s2.LastSeq-49 {
			t.Errorf("resume batch of %d missed: first %d omitted %d summary %v", s2.LastSeq, batch.FirstSeq, batch.Omitted, batch.Summary != nil)
		}
	}
	c2.pageAll(l, batch.FirstSeq, 50)
	if hi := l.contiguous(); hi < s2.LastSeq {
		t.Fatalf("log after restart ends at %d, session says %d", hi, s2.LastSeq)
	}

	// Every acked send is there, as the entry its ack named.
	stored := make(map[string]uint64) // id → seq of the user entry
	for seq, e := range l.bySeq {
		if e.Role != "user" {
			continue
		}
		sendID := e.MD("id")
		if prev, dup := stored[sendID]; dup {
			t.Errorf("send %s stored twice: seq %d and %d", sendID, prev, seq)
		}
		stored[sendID] = seq
	}
	for i := range n {
		seq, ok := acked[id(i)]
		if !ok {
			continue
		}
		e, found := l.bySeq[seq]
		switch {
		case !found:
			t.Errorf("acked %s (seq %d) lost", id(i), seq)
		case e.Role != "user" || e.MD("id") != id(i) || e.Content != content(i):
			t.Errorf("acked %s as seq %d, but seq %d is %s", id(i), seq, seq, e.Raw)
		}
	}

	// The same ids again, across the restart: the same acks, nothing new
	// stored for what was stored before the crash.
	for i := range n {
		c2.mustWrite(sendFrame(id(i), content(i)))
	}
	again := make(map[string]uint64)
	c2.until(30*time.Second, fmt.Sprintf("%d acks of the resends", n), func(f frame) {
		l.observe(f)
		switch f.Type {
		case "ack":
			if _, dup := again[f.ID]; dup {
				t.Errorf("two acks for resend %s", f.ID)
			}
			again[f.ID] = f.Seq
		case "error":
			t.Errorf("error frame: %s", f.Raw)
		}
	}, func(frame) bool { return len(again) == n })
	for i := range n {
		got := again[id(i)]
		if want, ok := acked[id(i)]; ok && got != want {
			t.Errorf("resend %s acked as %d, first ack was %d", id(i), got, want)
		} else if want, ok := stored[id(i)]; ok && got != want {
			t.Errorf("resend %s acked as %d, but it is stored as %d", id(i), got, want)
		} else if !ok && got <= s2.LastSeq {
			t.Errorf("resend %s (never stored) acked as old seq %d", id(i), got)
		}
	}

	// Every user entry gets exactly one agent reply, turns owed at the
	// crash included; then the whole log, read afresh, is gap-free with
	// each send stored once.
	users := func() (u, a int) {
		for _, e := range l.bySeq {
			switch e.Role {
			case "user":
				u++
			case "agent":
				a++
			}
		}
		return u, a
	}
	// The last resend's ack comes before its entry and reply: wait for
	// those too, or they reach the history read below but not l.
	newest := uint64(0)
	for _, seq := range again {
		newest = max(newest, seq)
	}
	caughtUp := func() bool {
		u, a := users()
		return u == a && l.contiguous() >= newest
	}
	if !caughtUp() {
		c2.until(30*time.Second, "an agent reply to every user entry", l.observe, func(frame) bool { return caughtUp() })
	}
	hi := l.contiguous()
	final := newEntryLog(t)
	c2.pageAll(final, hi+1, 200)
	if got := final.contiguous(); got != hi {
		t.Errorf("final read ends at %d, live stream at %d", got, hi)
	}
	replies := make(map[uint64]int)
	ids := make(map[string]int)
	for seq, e := range final.bySeq {
		if live, ok := l.bySeq[seq]; !ok || live.Content != e.Content || live.Role != e.Role {
			t.Errorf("seq %d differs between live stream and history: %s vs %s", seq, live.Raw, e.Raw)
		}
		switch e.Role {
		case "user":
			ids[e.MD("id")]++
			if want := strings.Replace(e.MD("id"), "c-", "message ", 1) + ", crash or not"; e.Content != want {
				t.Errorf("seq %d: content %q for id %s", seq, e.Content, e.MD("id"))
			}
		case "agent":
			replies[replyTo(e)]++
		}
	}
	if len(ids) != n {
		t.Errorf("%d distinct send ids stored, want %d", len(ids), n)
	}
	for sendID, k := range ids {
		if k != 1 {
			t.Errorf("send %s stored %d times", sendID, k)
		}
	}
	for seq, e := range final.bySeq {
		if e.Role == "user" && replies[seq] != 1 {
			t.Errorf("user entry %d has %d agent replies, want 1", seq, replies[seq])
		}
	}
}

func TestInterruptedSurvivesRestart(t *testing.T) {
	t.Parallel()
	tok := token(t, "alice")

	// resume checks that sid resumes on p with its two entries.
	resume := func(t *testing.T, p *proc, sid, text string) {
		t.Helper()
		c := dial(t, p.wsURL())
		s := c.hello(tok, sid, 0)
		if !s.Resumed || s.Reason != "resumed" || s.Status != "active" || s.LastSeq != 2 {
			t.Fatalf("resume %s: %s", sid, s.Raw)
		}
		b := c.expect("history_batch", 10*time.Second)
		if len(b.Messages) != 2 || b.Messages[0].Content != text || b.Messages[1].Role != "agent" {
			t.Fatalf("resume %s: batch %s", sid, b.Raw)
		}
	}

	t.Run("default window", func(t *testing.T) {
		t.Parallel()
		p := startServe(t, t.TempDir())
		gone := dial(t, p.wsURL())
		sGone := gone.hello(tok, "", 0).SessionID
		gone.chat("g-1", "I leave before the crash")
		gone.closeNormal()
		p.waitStatus(sGone, tok, "interrupted", 10*time.Second)

		live := dial(t, p.wsURL())
		sLive := live.hello(tok, "", 0).SessionID
		live.chat("l-1", "I am here at the crash")
		p.kill9()

		p2 := p.restart()
		for _, sid := range []string{sGone, sLive} {
			code, snap := p2.snapshot(sid, tok)
			if code != http.StatusOK || snap.Status != "interrupted" || snap.LastSeq != 2 {
				t.Errorf("snapshot of %s after restart: HTTP %d status %q last_seq %d, want 200 interrupted 2", sid, code, snap.Status, snap.LastSeq)
			}
		}
		resume(t, p2, sGone, "I leave before the crash")
		resume(t, p2, sLive, "I am here at the crash")
	})

	// With a 2s window, a session that disconnected just before the kill
	// is still resumable after a quick restart.
	t.Run("short window, quick restart", func(t *testing.T) {
		t.Parallel()
		p := startServe(t, t.TempDir(), "--window", "2s")
		c := dial(t, p.wsURL())
		sid := c.hello(tok, "", 0).SessionID
		c.chat("s-1", "short window")
		c.closeNormal()
		p.waitStatus(sid, tok, "interrupted", 10*time.Second)
		p.kill9()
		p2 := p.restart("--window", "2s")
		resume(t, p2, sid, "short window")
	})

	// The node stays down longer than the whole window: the window was
	// running when the node stopped, so the downtime does not count.
	t.Run("short window, downtime past it", func(t *testing.T) {
		t.Parallel()
		p := startServe(t, t.TempDir(), "--window", "2s")
		c := dial(t, p.wsURL())
		sid := c.hello(tok, "", 0).SessionID
		c.chat("d-1", "down longer than the window")
		c.closeNormal()
		p.waitStatus(sid, tok, "interrupted", 10*time.Second)
		interrupted := time.Now()
		// The node has been up for well under a second (its liveness
		// mark ticks every 1s): the restart must still count the downtime.
		p.kill9()
		// Not a synchronisation: the point is the wall clock passing the
		// window's original end while no process is running.
		time.Sleep(time.Until(interrupted.Add(2500 * time.Millisecond)))
		p2 := p.restart("--window", "2s")
		if code, snap := p2.snapshot(sid, tok); code != http.StatusOK || snap.Status != "interrupted" {
			t.Errorf("snapshot after restart: HTTP %d status %q, want interrupted", code, snap.Status)
		}
		resume(t, p2, sid, "down longer than the window")
	})
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir())
	tok := token(t, "alice")
	c := dial(t, p.wsURL())
	sid := c.hello(tok, "", 0).SessionID
	for i := range 3 {
		c.chat(fmt.Sprintf("g-%d", i), fmt.Sprintf("before the restart %d", i))
	}

	code, took := p.term(10 * time.Second)
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0\nstderr:\n%s", code, p.Stderr())
	}
	if took > 5*time.Second {
		t.Errorf("SIGTERM took %v to exit", took)
	}
	if cc := c.closeCode(5 * time.Second); cc != 1012 {
		t.Errorf("client closed with %d on SIGTERM, want 1012", cc)
	}
	if _, ok := findLine(p.Stderr(), "msg=stopped"); !ok {
		t.Errorf("no stopped line logged:\n%s", p.Stderr())
	}

	p2 := p.restart()
	if code, snap := p2.snapshot(sid, tok); code != http.StatusOK || snap.Status != "interrupted" {
		t.Errorf("after restart: HTTP %d status %q, want interrupted", code, snap.Status)
	}
	c2 := dial(t, p2.wsURL())
	s := c2.hello(tok, sid, 0)
	if !s.Resumed || s.Reason != "resumed" || s.LastSeq != 6 {
		t.Fatalf("resume after SIGTERM: %s", s.Raw)
	}
	b := c2.expect("history_batch", 10*time.Second)
	if len(b.Messages) != 6 || b.FirstSeq != 1 || b.LastSeq != 6 {
		t.Fatalf("resume batch: %s", b.Raw)
	}
	for i := range 3 {
		u, a := b.Messages[2*i], b.Messages[2*i+1]
		if want := fmt.Sprintf("before the restart %d", i); u.Role != "user" || u.Content != want || u.MD("id") != fmt.Sprintf("g-%d", i) {
			t.Errorf("entry %d: %s", u.Seq, u.Raw)
		}
		if a.Role != "agent" || a.Content != "Agent reply: "+u.Content {
			t.Errorf("entry %d: %s", a.Seq, a.Raw)
		}
	}
	// The log goes on from 6: no seq is reused.
	if u, _ := c2.chat("after", "after the restart"); u != 7 {
		t.Errorf("first send after the restart got seq %d, want 7", u)
	}
}

// TestGracefulShutdownDuringTool: SIGTERM while a non-idempotent search
// runs stops the node at once (exit 0, 1012), and the call is not run
// again after the restart: it ends failed, and the agent goes on.
func TestGracefulShutdownDuringTool(t *testing.T) {
	t.Parallel()
	tok := token(t, "alice")
	p, sid, userSeq, callID := toolRun(t, tok, "--demo-search-delay", "30s")
	code, took := p.term(10 * time.Second)
	if code != 0 || took > 5*time.Second {
		t.Errorf("SIGTERM during a tool run: exit %d after %v, want 0 within 5s", code, took)
	}
	p2 := p.restart("--agent", "demo", "--demo-search-delay", "100ms")
	l := turnAfterRestart(t, p2, tok, sid, userSeq)
	statuses, seqs, _, reply := callEntries(t, l, callID, userSeq)
	if len(statuses) != 2 || statuses[0] != "started" || statuses[1] != "failed" {
		t.Fatalf("call %s logged as %v, want [started failed]", callID, statuses)
	}
	if reply < seqs[1] {
		t.Errorf("agent reply %d before the failed entry %d", reply, seqs[1])
	}
	if runs := p2.mustMetric("tether_tool_runs_total"); runs != 0 {
		t.Errorf("tether_tool_runs_total = %v after the restart: the search ran again", runs)
	}
}

// toolRun starts a demo node with delay, sends one message and waits for
// the search call's started entry; it returns the node, the session and
// the user entry's seq and the call id.
func toolRun(t *testing.T, tok string, flags ...string) (p *proc, sid string, userSeq uint64, callID string) {
	t.Helper()
	p = startServe(t, t.TempDir(), append([]string{"--agent", "demo"}, flags...)...)
	c := dial(t, p.wsURL())
	sid = c.hello(tok, "", 0).SessionID
	c.mustWrite(sendFrame("q-1", "compare two laptops"))
	ack := c.until(10*time.Second, "ack", failOnError(t), func(f frame) bool { return f.Type == "ack" })
	started := c.until(10*time.Second, "tool started", failOnError(t), func(f frame) bool {
		return f.Type == "message" && f.Role == "tool" && f.MD("status") == "started"
	})
	if started.MD("name") != "search" || started.MD("call_id") == "" || replyTo(started) != ack.Seq {
		t.Fatalf("started entry: %s", started.Raw)
	}
	return p, sid, ack.Seq, started.MD("call_id")
}

// turnAfterRestart resumes sid on p and reads until the agent's reply to
// userSeq is there; it returns the whole log.
func turnAfterRestart(t *testing.T, p *proc, tok, sid string, userSeq uint64) *entryLog {
	t.Helper()
	c := dial(t, p.wsURL())
	s := c.hello(tok, sid, 0)
	if !s.Resumed || s.Reason != "resumed" {
		t.Fatalf("resume after crash: %s", s.Raw)
	}
	l := newEntryLog(t)
	answered := func() bool {
		for _, e := range l.bySeq {
			if e.Role == "agent" && replyTo(e) == userSeq {
				return true
			}
		}
		return false
	}
	c.until(20*time.Second, "the agent's reply", func(f frame) {
		l.observe(f)
		failOnError(t)(f)
	}, func(frame) bool { return answered() })
	l.contiguous()
	return l
}

// callEntries returns the statuses of callID's tool entries in seq order,
// the seq of each, and the seq of the agent reply to userSeq.
func callEntries(t *testing.T, l *entryLog, callID string, userSeq uint64) (statuses []string, seqs []uint64, entries []frame, reply uint64) {
	t.Helper()
	hi := l.contiguous()
	for s := uint64(1); s <= hi; s++ {
		e := l.bySeq[s]
		if e.Role == "tool" && e.MD("call_id") == callID {
			statuses = append(statuses, e.MD("status"))
			seqs = append(seqs, s)
			entries = append(entries, e)
		}
		if e.Role == "agent" && replyTo(e) == userSeq {
			if reply != 0 {
				t.Errorf("two agent replies to %d: %d and %d", userSeq, reply, s)
			}
			reply = s
		}
	}
	return statuses, seqs, entries, reply
}

func TestToolCrashNotIdempotent(t *testing.T) {
	t.Parallel()
	tok := token(t, "alice")
	p, sid, userSeq, callID := toolRun(t, tok, "--demo-search-delay", "30s")
	p.kill9()
	p2 := p.restart("--agent", "demo", "--demo-search-delay", "100ms")
	l := turnAfterRestart(t, p2, tok, sid, userSeq)

	statuses, seqs, entries, reply := callEntries(t, l, callID, userSeq)
	if len(statuses) != 2 || statuses[0] != "started" || statuses[1] != "failed" {
		t.Fatalf("call %s logged as %v, want [started failed]", callID, statuses)
	}
	if f := entries[1]; f.Content != "interrupted" || f.MD("result") != "interrupted" {
		t.Errorf("failed entry: %s, want content and result \"interrupted\"", f.Raw)
	}
	if reply < seqs[1] {
		t.Errorf("agent reply %d before the failed entry %d", reply, seqs[1])
	}
	if runs := p2.mustMetric("tether_tool_runs_total"); runs != 0 {
		t.Errorf("tether_tool_runs_total = %v on the restarted node: the search ran again", runs)
	}
	if _, snap := p2.snapshot(sid, tok); snap.PendingToolCall != nil {
		t.Errorf("pending tool call still set: %+v", snap.PendingToolCall)
	}
}

func TestToolCrashIdempotent(t *testing.T) {
	t.Parallel()
	tok := token(t, "alice")
	idem := []string{"--agent", "demo", "--demo-search-idempotent"}
	long := append(idem[:len(idem):len(idem)], "--demo-search-delay", "30s")
	short := append(idem[:len(idem):len(idem)], "--demo-search-delay", "100ms")

	// One crash: the call is run once more and completes.
	t.Run("one crash", func(t *testing.T) {
		t.Parallel()
		p, sid, userSeq, callID := toolRun(t, tok, long[2:]...)
		p.kill9()
		p2 := p.restart(short...)
		l := turnAfterRestart(t, p2, tok, sid, userSeq)
		statuses, seqs, entries, reply := callEntries(t, l, callID, userSeq)
		if len(statuses) != 2 || statuses[0] != "started" || statuses[1] != "completed" {
			t.Fatalf("call %s logged as %v, want [started completed]", callID, statuses)
		}
		if !strings.Contains(entries[1].Content, "Found 3 results") {
			t.Errorf("completed entry: %s", entries[1].Raw)
		}
		if reply < seqs[1] {
			t.Errorf("agent reply %d before the completed entry %d", reply, seqs[1])
		}
		if runs := p2.mustMetric("tether_tool_runs_total"); runs != 1 {
			t.Errorf("tether_tool_runs_total = %v on the restarted node, want 1", runs)
		}
	})

	// A second crash during the re-run: the call fails as interrupted
	// rather than running a third time.
	t.Run("crash during the re-run", func(t *testing.T) {
		t.Parallel()
		p, sid, userSeq, callID := toolRun(t, tok, long[2:]...)
		p.kill9()
		p2 := p.restart(long...)
		poll(t, 10*time.Second, "the re-run to start", func() bool {
			v, err := p2.metric("tether_tool_runs_total")
			return err == nil && v == 1
		})
		p2.kill9()
		p3 := p2.restart(short...)
		l := turnAfterRestart(t, p3, tok, sid, userSeq)
		statuses, seqs, entries, reply := callEntries(t, l, callID, userSeq)
		if runs := p3.mustMetric("tether_tool_runs_total"); runs != 0 {
			t.Errorf("tether_tool_runs_total = %v on the third node, want 0: a third run of the search", runs)
		}
		if len(statuses) != 2 || statuses[0] != "started" || statuses[1] != "failed" {
			t.Fatalf("call %s logged as %v, want [started failed]", callID, statuses)
		}
		if f := entries[1]; f.Content != "interrupted" || f.MD("result") != "interrupted" {
			t.Errorf("failed entry: %s, want \"interrupted\"", f.Raw)
		}
		if reply < seqs[1] {
			t.Errorf("agent reply %d before the failed entry %d", reply, seqs[1])
		}
	})
}
