package gateway_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// sessionKeys are the fields every session frame has (PROTOCOL.md).
var sessionKeys = []string{"type", "session_id", "resumed", "reason", "status", "last_seq", "window_s", "context", "pending_tool_call", "sensitive"}

// checkSession checks a session frame's fixed fields.
func checkSession(t *testing.T, s map[string]any, resumed bool, reason string, lastSeq uint64, windowS float64) string {
	t.Helper()
	wantKeys(t, "session", s, sessionKeys...)
	sid := str(t, s["session_id"])
	if sid == "" || len(sid) > 64 {
		t.Errorf("session_id %q: want 1–64 characters", sid)
	}
	if s["resumed"] != resumed || s["reason"] != reason {
		t.Errorf("want resumed:%v reason:%s, got %v", resumed, reason, s)
	}
	if s["status"] != "active" {
		t.Errorf("status %v, want active", s["status"])
	}
	if got := num(t, s["last_seq"]); got != lastSeq {
		t.Errorf("last_seq %d, want %d", got, lastSeq)
	}
	if s["window_s"] != windowS {
		t.Errorf("window_s %v, want %v", s["window_s"], windowS)
	}
	obj(t, s["context"])
	if _, ok := s["sensitive"].(bool); !ok {
		t.Errorf("sensitive %v is not a bool", s["sensitive"])
	}
	return sid
}

func TestNewSession(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	c := dial(t, n.URL)
	s := c.hello(nodetest.Token(t, "alice"), "", 0)
	sid := checkSession(t, s, false, "new", 0, 300)
	if ctx := obj(t, s["context"]); len(ctx) != 0 {
		t.Errorf("context of a new session: %v, want {}", ctx)
	}
	if s["pending_tool_call"] != nil || s["sensitive"] != false {
		t.Errorf("new session: pending_tool_call %v sensitive %v", s["pending_tool_call"], s["sensitive"])
	}

	// No history_batch after resumed:false: the very next frame answers
	// the send. The ack comes before the entry's message.
	c.send(map[string]any{"type": "send", "id": "c-7f3a", "content": "hello there", "metadata": map[string]any{"k": "v"}, "extra": 1})
	if got := c.ackOf("c-7f3a"); got != 1 {
		t.Fatalf("first entry of a new session has seq %d, want 1", got)
	}
	u := c.message(1, "user")
	md := obj(t, u["metadata"])
	if u["content"] != "hello there" || md["id"] != "c-7f3a" || md["k"] != "v" {
		t.Fatalf("user message %v", u)
	}
	a := c.message(2, "agent")
	if a["content"] != "Agent reply: hello there" {
		t.Fatalf("agent message %v", a)
	}
	if c.chat("c-2", "second") != 3 {
		t.Fatal("seqs are not consecutive")
	}

	// Another new session gets another id.
	c2 := dial(t, n.URL)
	s2 := c2.hello(nodetest.Token(t, "alice"), "", 0)
	if sid2 := checkSession(t, s2, false, "new", 0, 300); sid2 == sid {
		t.Fatalf("two new sessions share id %s", sid)
	}
}

func TestResumeReplay(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	for i := range 3 {
		c.chat(fmt.Sprintf("m%d", i), fmt.Sprintf("text %d", i))
	}
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")

	// The client saw up to seq 2: it gets 3..6.
	c2 := dial(t, n.URL)
	s, b := c2.resume(tok, sid, 2)
	checkSession(t, s, true, "resumed", 6, 300)
	if got := batchSeqs(t, b); !seqsEq(got, span(3, 6)) {
		t.Fatalf("replayed %v, want 3..6", got)
	}
	if num(t, b["omitted"]) != 0 || b["summary"] != nil {
		t.Fatalf("omitted/summary %v/%v, want 0/null", b["omitted"], b["summary"])
	}
	msgs := b["messages"].([]any)
	first := obj(t, msgs[0])
	if first["role"] != "user" || first["content"] != "text 1" || obj(t, first["metadata"])["id"] != "m1" {
		t.Fatalf("replayed entry 3: %v", first)
	}
	if last := obj(t, msgs[3]); last["role"] != "agent" || last["content"] != "Agent reply: text 2" {
		t.Fatalf("replayed entry 6: %v", last)
	}
	if c2.chat("m3", "after resume") != 7 {
		t.Fatal("send after resume did not get seq 7")
	}
	c2.closeClean() // a client close (1000) interrupts too
	n.waitStatus(t, tok, sid, "interrupted")

	// Nothing missed: an empty batch, still sent exactly once.
	c3 := dial(t, n.URL)
	s, b = c3.resume(tok, sid, 8)
	checkSession(t, s, true, "resumed", 8, 300)
	if got := batchSeqs(t, b); len(got) != 0 {
		t.Fatalf("nothing was missed but got %v", got)
	}
	if num(t, b["omitted"]) != 0 || b["summary"] != nil || num(t, b["first_seq"]) != 0 || num(t, b["last_seq"]) != 0 {
		t.Fatalf("empty batch: %v", b)
	}
	// The next frame answers the next request: exactly one batch was sent.
	c3.sendMsg("m4", "x")
	c3.ackOf("m4")
	c3.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")

	// A missing last_seq means 0: everything is replayed. stream and
	// unknown fields are accepted.
	c4 := dial(t, n.URL)
	c4.send(map[string]any{"type": "hello", "token": tok, "session_id": sid, "stream": map[string]any{"seq": 10, "part": 0}, "unknown": true})
	s = c4.readType("session")
	checkSession(t, s, true, "resumed", 10, 300)
	b = c4.readType("history_batch")
	if got := batchSeqs(t, b); !seqsEq(got, span(1, 10)) {
		t.Fatalf("hello without last_seq replayed %v, want 1..10", got)
	}
}

func TestIdempotentSend(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	if c.chat("dup", "once") != 1 {
		t.Fatal("want seq 1")
	}
	// Same connection: the same ack, and nothing after it.
	c.sendMsg("dup", "once")
	if got := c.ackOf("dup"); got != 1 {
		t.Fatalf("repeated send got ack seq %d, want 1", got)
	}
	if c.chat("next", "two") != 3 { // the frame after the repeated ack is this ack
		t.Fatal("a repeated send stored something")
	}
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")

	// After a reconnect, even with other content.
	c2 := dial(t, n.URL)
	_, b := c2.resume(tok, sid, 4)
	if len(batchSeqs(t, b)) != 0 {
		t.Fatal("unexpected replay")
	}
	c2.sendMsg("dup", "once")
	if got := c2.ackOf("dup"); got != 1 {
		t.Fatalf("resent id after reconnect: ack seq %d, want 1", got)
	}
	c2.sendMsg("next", "changed content")
	if got := c2.ackOf("next"); got != 3 {
		t.Fatalf("resent id: ack seq %d, want 3", got)
	}
	if s := n.snapshot(t, tok, sid); s.LastSeq != 4 {
		t.Fatalf("repeated sends stored entries: last_seq %d, want 4", s.LastSeq)
	}
	if c2.chat("new", "three") != 5 {
		t.Fatal("want seq 5")
	}
}

func TestOtherUsersSession(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	alice, mallory := nodetest.Token(t, "alice"), nodetest.Token(t, "mallory")
	v := dial(t, n.URL)
	vsid := checkSession(t, v.hello(alice, "", 0), false, "new", 0, 300)
	v.chat("a1", "secret plan")
	v.send(map[string]any{"type": "context", "set": map[string]any{"goal": "private"}})
	v.readType("context")

	// While the victim is connected: no supersede, no leak.
	m := dial(t, n.URL)
	s := m.hello(mallory, vsid, 0)
	msid := checkSession(t, s, false, "not_found", 0, 300)
	if msid == vsid || len(obj(t, s["context"])) != 0 || s["sensitive"] != false {
		t.Fatalf("another user's resume leaked the session: %v", s)
	}
	// No history_batch follows: the next frame answers the send, and it
	// lands in mallory's own new session.
	m.sendMsg("x", "intrusion")
	if got := m.ackOf("x"); got != 1 {
		t.Fatalf("mallory's send got seq %d in what should be a new session", got)
	}
	if v.chat("a2", "still mine") != 3 {
		t.Fatal("the victim's connection was disturbed")
	}
	v.closeNow()
	before := n.waitStatus(t, alice, vsid, "interrupted")

	// While interrupted; unknown and over-long ids answer alike.
	answers := map[string]map[string]any{}
	for name, id := range map[string]string{
		"victim":    vsid,
		"unknown":   "ZZZZZZZZZZZZZZZZZZZZZZZZZZ",
		"long":      strings.Repeat("A", 65),
		"very long": strings.Repeat("B", 5000),
		"nul":       "abc\x00def",
	} {
		c := dial(t, n.URL)
		s := c.hello(mallory, id, 3)
		sid := checkSession(t, s, false, "not_found", 0, 300)
		if sid == vsid || sid == id {
			t.Fatalf("%s: got session id %s", name, sid)
		}
		delete(s, "session_id")
		answers[name] = s
		c.sendMsg("probe", "p") // no history_batch in between
		c.ackOf("probe")
	}
	for name, a := range answers {
		if !maps.EqualFunc(a, answers["victim"], func(x, y any) bool { return jsonEq(x, y) }) {
			t.Errorf("answer for %s id %v differs from another user's id %v", name, a, answers["victim"])
		}
	}

	after := n.snapshot(t, alice, vsid)
	if after.LastSeq != before.LastSeq || after.Status != "interrupted" || after.LastActiveAt != before.LastActiveAt ||
		!jsonEq(after.Context, before.Context) || after.LastSeq != 4 {
		t.Fatalf("the victim session changed: before %+v after %+v", before, after)
	}
	if code := getJSON(t, n.HTTP+"/v1/sessions/"+vsid, mallory, nil); code != 404 {
		t.Fatalf("another user's snapshot: %d, want 404", code)
	}
	v2 := dial(t, n.URL)
	s, b := v2.resume(alice, vsid, 2)
	checkSession(t, s, true, "resumed", 4, 300)
	if got := batchSeqs(t, b); !seqsEq(got, span(3, 4)) {
		t.Fatalf("victim replay %v", got)
	}
	if obj(t, s["context"])["goal"] != "private" {
		t.Fatalf("victim context lost: %v", s["context"])
	}
}

func TestWindowExpiry(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{ManualClock: true, Actor: actor.Config{Window: time.Minute}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 60)
	c.chat("a", "hi")
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")

	// Within the window (59 s): resumed.
	n.Clock.Advance(59 * time.Second)
	c2 := dial(t, n.URL)
	s, _ := c2.resume(tok, sid, 2)
	checkSession(t, s, true, "resumed", 2, 60)
	c2.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")

	// The window counts from the last disconnect: 59 s more is fine...
	n.Clock.Advance(59 * time.Second)
	if st := n.snapshot(t, tok, sid).Status; st != "interrupted" {
		t.Fatalf("59s after the disconnect the snapshot says %s", st)
	}
	// ...61 s is not.
	n.Clock.Advance(2 * time.Second)
	if st := n.snapshot(t, tok, sid).Status; st != "expired" {
		t.Fatalf("after the window the snapshot says %s, want expired", st)
	}
	c3 := dial(t, n.URL)
	s = c3.hello(tok, sid, 2)
	nsid := checkSession(t, s, false, "expired", 0, 60)
	if nsid == sid {
		t.Fatal("an expired session was given back")
	}
	c3.sendMsg("b", "x") // no history_batch
	if c3.ackOf("b") != 1 {
		t.Fatal("the new session is not empty")
	}
	// It never comes back.
	for range 2 {
		c4 := dial(t, n.URL)
		s := c4.hello(tok, sid, 0)
		if s["resumed"] != false || (s["reason"] != "expired" && s["reason"] != "not_found") || s["session_id"] == sid {
			t.Fatalf("expired session came back: %v", s)
		}
		c4.closeNow()
	}
	if st := n.snapshot(t, tok, sid); st.Status != "expired" || st.LastSeq != 2 {
		t.Fatalf("expired session: %+v", st)
	}
	// Another user learns nothing: not_found, not expired.
	m := dial(t, n.URL)
	checkSession(t, m.hello(nodetest.Token(t, "mallory"), sid, 0), false, "not_found", 0, 60)
}

func TestReplayLimitSummaryPaging(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Actor: actor.Config{ReplayLimit: 5}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	for i := range 10 {
		c.chat(fmt.Sprintf("m%02d", i), fmt.Sprintf("message %d", i))
	}
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")

	c2 := dial(t, n.URL)
	s, b := c2.resume(tok, sid, 2)
	checkSession(t, s, true, "resumed", 20, 300)
	if got := batchSeqs(t, b); !seqsEq(got, span(16, 20)) {
		t.Fatalf("replay %v, want the newest 5 (16..20)", got)
	}
	if got := num(t, b["omitted"]); got != 13 {
		t.Fatalf("omitted %d, want 13 (seqs 3..15)", got)
	}
	if sum, ok := b["summary"].(string); !ok || strings.TrimSpace(sum) == "" {
		t.Fatalf("summary %#v, want a non-empty string", b["summary"])
	}

	// Page back from first_seq.
	h := c2.history(num(t, b["first_seq"]), 3)
	if got := batchSeqs(t, h); !seqsEq(got, span(13, 15)) {
		t.Fatalf("history before 16 limit 3: %v", got)
	}
	all := []uint64{}
	before := uint64(13)
	for before > 1 {
		h := c2.history(before, 4)
		got := batchSeqs(t, h)
		if len(got) == 0 || got[len(got)-1] != before-1 {
			t.Fatalf("history before %d: %v", before, got)
		}
		all = append(got, all...)
		before = got[0]
	}
	if !seqsEq(all, span(1, 12)) {
		t.Fatalf("paged %v, want 1..12", all)
	}
	if got := batchSeqs(t, c2.history(1, 10)); len(got) != 0 {
		t.Fatalf("history before 1: %v", got)
	}
	// Without before_seq: the newest entries.
	if got := batchSeqs(t, c2.history(0, 2)); !seqsEq(got, span(19, 20)) {
		t.Fatalf("history without before_seq: %v", got)
	}

	// A negative limit is a bad_request; the connection stays open.
	c2.send(map[string]any{"type": "history", "before_seq": 10, "limit": -1})
	if e := c2.readType("error"); e["code"] != "bad_request" {
		t.Fatalf("negative limit: %v", e)
	}
	if c2.chat("after", "still open") != 21 {
		t.Fatal("want seq 21")
	}

	// The snapshot's messages are the newest replay_limit entries.
	snap := n.snapshot(t, tok, sid)
	if len(snap.Messages) != 5 || snap.Messages[0].Seq != 18 || snap.Messages[4].Seq != 22 {
		t.Fatalf("snapshot messages: %+v", snap.Messages)
	}
}

func TestHistoryLimitCap(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{NoRateLimit: true}, Actor: actor.Config{MaxTurns: 1000}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	const sends = 110
	for i := range sends {
		c.sendMsg(fmt.Sprintf("m%d", i), "x")
	}
	agents := 0
	for agents < sends {
		f := c.read()
		if f["type"] == "message" && f["role"] == "agent" {
			agents++
		}
		if f["type"] == "error" {
			t.Fatalf("error %v", f)
		}
	}
	h := c.history(2*sends+1, 500)
	if got := batchSeqs(t, h); !seqsEq(got, span(2*sends-199, 2*sends)) {
		t.Fatalf("history with limit 500 returned %d entries (%v…), want 200 (21..220)", len(got), got[:min(3, len(got))])
	}
	if got := batchSeqs(t, c.history(0, 200)); len(got) != 200 {
		t.Fatalf("limit 200: %d entries", len(got))
	}
}

// TestPingPong: ping is answered at once with pong echoing its id (or
// without one), any time after hello, and does not count against --rate.
func TestPingPong(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{Rate: 1}})
	c := dial(t, n.URL)
	c.hello(nodetest.Token(t, "alice"), "", 0)
	for i := range 20 { // far past the rate of 1/s with bursts of 2
		c.send(map[string]any{"type": "ping", "id": fmt.Sprintf("h-%d", i)})
		if p := c.read(); p["type"] != "pong" || p["id"] != fmt.Sprintf("h-%d", i) {
			t.Fatalf("ping %d answered with %v", i, p)
		}
	}
	c.send(map[string]any{"type": "ping"})
	if p := c.read(); p["type"] != "pong" || p["id"] != nil {
		t.Fatalf("ping without id answered with %v", p)
	}
	// Sends are still limited on their own.
	c.sendMsg("s-1", "one")
	if c.ackOf("s-1") != 1 {
		t.Fatal("send after pings not acked")
	}
}
