package node_test

// A client speaking PROTOCOL.md over a raw WebSocket (gateway/wstest),
// and a ledger that feeds what a client saw, and the session's whole log
// read back after, into bench.Verifier.

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/bench"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/gateway/wstest"
)

// frame is any server frame (gateway/wstest).
type frame = wstest.Frame

// wsc is one connection, with the waits these tests use (all bounded by
// waitFor).
type wsc struct {
	*wstest.Conn
	t    testing.TB
	last uint64 // the newest seq this connection was shown, see follow
}

// dial connects to a node's WebSocket.
func dial(t testing.TB, n *tnode) *wsc {
	t.Helper()
	c, err := dialURL(t, n.URL())
	if err != nil {
		t.Fatalf("dial %s: %v", n.id, err)
	}
	return c
}

func dialURL(t testing.TB, url string) (*wsc, error) {
	c, err := wstest.Dial(t, url)
	if err != nil {
		return nil, err
	}
	return &wsc{Conn: c, t: t}, nil
}

// until reads frames, giving each to seen, until match accepts one.
func (c *wsc) until(what string, seen func(frame), match func(frame) bool) frame {
	c.t.Helper()
	return c.Until(waitFor, what, seen, match)
}

// hello sends a hello (a new session when sid is empty) and returns the
// server's answer: the session frame, or the error frame.
func (c *wsc) hello(tok, sid string, lastSeq uint64) frame {
	c.t.Helper()
	return c.Hello(tok, sid, lastSeq, waitFor)
}

// follow returns a wsc.until callback that gives frames to l and fails
// the test on an error frame l does not expect. It keeps c.last, the
// newest seq this connection was shown (a resume starts from it): from
// the hello's last_seq, moved by each history_batch and message. Whether
// the entries came gap-free and in order is l's Verifier's to judge.
func (c *wsc) follow(l *ledger) func(frame) {
	return func(f frame) {
		c.t.Helper()
		switch f.Type {
		case "history_batch":
			if len(f.Messages) > 0 {
				c.last = f.LastSeq
			}
		case "message":
			c.last = f.Seq
		case "error":
			if l == nil || !l.allowed(f.Code) {
				c.t.Errorf("%s: error frame %s", c.URL, f.Raw)
			}
		}
		if l != nil {
			l.observe(f)
		}
	}
}

func sendFrame(id, content string) map[string]any {
	return map[string]any{"type": "send", "id": id, "content": content}
}

// ledger is one client's view of one session, fed as it comes into a
// bench.Verifier, the continuity checker `tether bench` uses, so that
// these tests hold the cluster to the same promises as the benchmark:
// entries delivered gap-free and in order across the client's
// connections, each send acked with one seq, a resume never behind what
// the client saw; and, given the whole log by check, every entry seen is
// in it unchanged, every ack is its user entry, every user entry has a
// reply and every tool call ran once. Each violation fails the test when
// it is found.
//
// One ledger is one client: the Verifier wants the entries in delivery
// order, so a session's connections that run side by side (a shared
// attach) each need their own ledger, and a client that resumes must do
// so from the newest seq it was shown.
type ledger struct {
	t testing.TB
	v *bench.Verifier

	mu    sync.Mutex
	sid   string          // from the session frames, for the failure messages
	allow map[string]bool // error codes the test expects
}

// ledgerKey is the Verifier's name for the ledger's session: each ledger has
// a Verifier of its own, so one name does.
const ledgerKey = "client"

func newLedger(t testing.TB) *ledger {
	l := &ledger{t: t}
	l.v = bench.NewVerifier(bench.VerifierConfig{OnViolation: func(v bench.Violation) {
		l.t.Errorf("session %s: %s at seqs %v: %s", l.session(), v.Kind, v.Seqs, v.Detail)
	}})
	return l
}

// expect makes an error frame with code no failure (see follow).
func (l *ledger) expect(code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.allow == nil {
		l.allow = map[string]bool{}
	}
	l.allow[code] = true
}

func (l *ledger) allowed(code string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allow[code]
}

func (l *ledger) session() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sid
}

// observe gives one frame the client was shown to the Verifier; it is a
// wsc.until callback. Frames must come in the order the client read
// them, every entry among them: a message the test skipped would be a
// gap. A history_batch is taken for a resume's replay (pages asked for
// with history are not deliveries: never observe them).
func (l *ledger) observe(f frame) {
	switch f.Type {
	case "message":
		l.v.Feed(ledgerKey, bench.Event{Kind: bench.EvEntry, Msg: message(f)})
	case "history_batch":
		for _, m := range f.Messages {
			l.v.Feed(ledgerKey, bench.Event{Kind: bench.EvEntry, Msg: message(m)})
		}
	case "ack":
		l.v.Feed(ledgerKey, bench.Event{Kind: bench.EvAck, SendID: f.ID, Seq: f.Seq})
	case "session":
		l.mu.Lock()
		l.sid = f.SessionID
		l.mu.Unlock()
		if f.Reason == wire.ReasonNew {
			return // a new session: nothing was resumed
		}
		// Away stays 0: these tests never leave a session for its
		// window, so a resume refused as expired is a violation too.
		l.v.Feed(ledgerKey, bench.Event{Kind: bench.EvResume, Frame: wire.SessionFrame{
			Type: f.Type, SessionID: f.SessionID, Resumed: f.Resumed, Reason: f.Reason,
			Status: f.Status, LastSeq: f.LastSeq, WindowS: f.WindowS,
		}})
	}
}

// message is the entry a message frame (or a history_batch element)
// carries.
func message(f frame) wire.Message {
	return wire.Message{Seq: f.Seq, Role: f.Role, Content: f.Content, Timestamp: f.Timestamp, Metadata: f.Metadata}
}

// check gives the Verifier the session's whole log (from wholeLog) and
// fails the test if it finds the log, or what the client was shown,
// breaking a promise. Call it once, when the session is settled (every
// turn answered): the Verifier judges nothing fed after. It returns the
// log's last seq.
func (l *ledger) check(log []frame) uint64 {
	l.t.Helper()
	entries := make([]wire.Message, len(log))
	for i, e := range log {
		entries[i] = message(e)
	}
	l.v.Feed(ledgerKey, bench.Event{Kind: bench.EvFinal, Log: entries})
	c := l.v.Counts()
	if c.Verified != 1 {
		// A resume was refused: the Verifier judged the session by
		// what its client saw alone and never compared the log.
		l.t.Errorf("session %s: the log was not verified (%+v)", l.session(), c)
	}
	l.t.Logf("session %s: %d entries read back, %d seen compared with them, %d of %d acks found, %d user entries checked for a reply, %d tool calls",
		l.session(), c.EntriesReread, c.EntriesCompared, c.AcksVerified, c.AckedSends, c.UserEntries, c.ToolCalls)
	return uint64(len(log))
}

// helloRetry dials n and says hello (a new session when sid is empty),
// again while the answer is unavailable, as a client would (the cluster
// is settling: a configuration being applied, a link still dialing, a
// node under load missing a heartbeat), for up to waitFor; it returns the
// connection and the last answer.
func helloRetry(t testing.TB, n *tnode, tok, sid string, lastSeq uint64) (*wsc, frame) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); ; {
		c := dial(t, n)
		s := c.hello(tok, sid, lastSeq)
		if s.Type != "error" || s.Code != "unavailable" || time.Now().After(deadline) {
			return c, s
		}
		c.Drop()
		time.Sleep(50 * time.Millisecond) // a client's retry backoff
	}
}

// newSession opens a new session through n (helloRetry) and returns the
// connection and the session frame.
func newSession(t testing.TB, n *tnode, tok string) (*wsc, frame) {
	t.Helper()
	c, s := helloRetry(t, n, tok, "", 0)
	if s.Type != "session" {
		t.Fatalf("new session via %s: %s", n.id, s.Raw)
	}
	return c, s
}

// wholeLog resumes sid at 0 through n (the resume batch holds the whole
// log: the nodes replay up to 1000 entries) and returns its entries; the
// connection is closed after.
func wholeLog(t testing.TB, n *tnode, tok, sid string) []frame {
	t.Helper()
	c, s := helloRetry(t, n, tok, sid, 0)
	defer c.Drop()
	if s.Type != "session" || !s.Resumed {
		t.Fatalf("resume %s via %s: %s", sid, n.id, s.Raw)
	}
	b := c.until("history_batch", nil, func(f frame) bool { return f.Type == "history_batch" })
	log := b.Messages
	for len(log) > 0 && log[0].Seq > 1 { // more than one batch holds: page back
		if err := c.Write(map[string]any{"type": "history", "before_seq": log[0].Seq, "limit": 200}); err != nil {
			t.Fatal(err)
		}
		h := c.until("history page", nil, func(f frame) bool { return f.Type == "history_batch" })
		if len(h.Messages) == 0 {
			t.Fatalf("empty history page before seq %d", log[0].Seq)
		}
		log = append(h.Messages, log...)
	}
	if uint64(len(log)) != s.LastSeq {
		t.Fatalf("resume at 0 and history pages hold %d entries, the session %d", len(log), s.LastSeq)
	}
	return log
}

// failures is a testing.TB that keeps what is reported to it.
type failures struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *failures) Helper()             {}
func (r *failures) Logf(string, ...any) {}
func (r *failures) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// The ledger is the only check of continuity these tests have: it must
// hand the Verifier what the client saw so that a broken promise fails
// the test, and a sound session must not.
func TestLedgerFeedsVerifier(t *testing.T) {
	t.Parallel()
	user := func(seq uint64, id string) frame {
		return frame{Type: "message", Seq: seq, Role: "user", Content: id, Metadata: map[string]any{"id": id}}
	}
	agent := func(seq, replyTo uint64) frame {
		return frame{Type: "message", Seq: seq, Role: "agent", Content: "ok", Metadata: map[string]any{"reply_to": float64(replyTo)}}
	}
	ack := func(id string, seq uint64) frame { return frame{Type: "ack", ID: id, Seq: seq} }
	resumed := func(last uint64) frame {
		return frame{Type: "session", SessionID: "s", Resumed: true, Reason: "resumed", LastSeq: last, WindowS: 300}
	}
	batch := func(ms ...frame) frame { return frame{Type: "history_batch", Messages: ms} }
	newSession := frame{Type: "session", SessionID: "s", Reason: "new", WindowS: 300}
	log := []frame{user(1, "m1"), agent(2, 1), user(3, "m2"), agent(4, 3)}
	changed := agent(2, 1)
	changed.Content = "not ok"

	for _, tc := range []struct {
		name string
		seen []frame
		log  []frame
		want string // the violation kind, "" for none
	}{
		{"sound", []frame{newSession, user(1, "m1"), ack("m1", 1), agent(2, 1), resumed(2), batch(), user(3, "m2"), ack("m2", 3), agent(4, 3)}, log, ""},
		{"sound resume with a replay", []frame{newSession, user(1, "m1"), ack("m1", 1), resumed(1), batch(agent(2, 1), user(3, "m2"), agent(4, 3))}, log, ""},
		{"a gap", []frame{user(1, "m1"), agent(4, 3)}, log, bench.VGap},
		{"an entry twice", []frame{user(1, "m1"), resumed(0), batch(user(1, "m1"))}, log, bench.VDuplicateSeq},
		{"a resume behind", []frame{user(1, "m1"), agent(2, 1), resumed(1)}, log, bench.VLogTruncated},
		{"a resume refused", []frame{user(1, "m1"), {Type: "session", SessionID: "s", Reason: "not_found"}}, log, bench.VSessionLost},
		{"one send, two acks", []frame{ack("m1", 1), ack("m1", 3)}, log, bench.VAckChanged},
		{"an ack not at its entry", []frame{ack("m1", 2)}, log, bench.VLostAck},
		{"an ack past the log", []frame{ack("m3", 5)}, log, bench.VLostAck},
		{"an entry changed", []frame{user(1, "m1"), changed}, log, bench.VEntryChanged},
		{"entries lost", []frame{user(1, "m1"), agent(2, 1), user(3, "m2"), agent(4, 3)}, log[:2], bench.VLostEntries},
		{"an unanswered send", nil, log[:3], bench.VUnanswered},
		{"a log with a gap", nil, []frame{user(1, "m1"), agent(3, 1)}, bench.VGap},
	} {
		r := &failures{TB: t}
		l := newLedger(r)
		for _, f := range tc.seen {
			l.observe(f)
		}
		l.check(tc.log)
		switch {
		case tc.want == "" && len(r.errs) > 0:
			t.Errorf("%s: %q", tc.name, r.errs)
		case tc.want != "" && !slices.ContainsFunc(r.errs, func(e string) bool { return strings.Contains(e, ": "+tc.want+" at ") }):
			t.Errorf("%s: %q, want a %s violation", tc.name, r.errs, tc.want)
		}
	}
}
