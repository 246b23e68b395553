package gateway_test

// Issue 6, item 2: one frame cannot break a session. What the log could
// not read back is refused at the door (wal.CheckValue, the rule the
// log's reader is built around); and data that is unreadable on disk
// anyway never makes a session unreachable for its owner, nor visible to
// anyone else, is counted on /metrics, and is still swept.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/wal"
)

// deep is a JSON value nesting exactly depth levels as wal.CheckValue
// counts them (a map or array holding only scalars is one level), maps
// and arrays alternating; the outermost is a map.
func deep(depth int) map[string]any {
	var v any = "leaf"
	for i := depth - 1; i >= 1; i-- {
		if i%2 == 1 {
			v = []any{"s", v}
		} else {
			v = map[string]any{"k": v, "n": float64(i)}
		}
	}
	return map[string]any{"top": v}
}

// sameJSON compares what a client would see of two values.
func sameJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

// withoutID is a message's metadata less the send id the server adds.
func withoutID(md map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range md {
		if k != "id" {
			out[k] = v
		}
	}
	return out
}

func TestDeepValuesRefusedAtTheDoor(t *testing.T) {
	t.Parallel()
	// The helper's idea of depth is the door's.
	if err := wal.CheckValue(deep(wal.MaxValueDepth)); err != nil {
		t.Fatalf("CheckValue(depth %d): %v", wal.MaxValueDepth, err)
	}
	if err := wal.CheckValue(deep(wal.MaxValueDepth + 1)); err == nil {
		t.Fatalf("CheckValue(depth %d) accepted", wal.MaxValueDepth+1)
	}

	n := startNode(t, nodetest.Options{})
	alice, bob := nodetest.Token(t, "alice"), nodetest.Token(t, "bob")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(alice, "", 0), false, "new", 0, 300)
	c.chat("base", "base")
	c.send(map[string]any{"type": "context", "set": map[string]any{"goal": "keep me"}})
	c.readType("context")

	// Too deep, by one level and by the 64+ of the original attack:
	// bad_request naming the send, nothing stored, the connection open.
	for _, d := range []int{wal.MaxValueDepth + 1, 64, 65, 500} {
		id := fmt.Sprintf("deep-%d", d)
		c.send(map[string]any{"type": "send", "id": id, "content": "x", "metadata": deep(d)})
		if e := c.readType("error"); e["code"] != "bad_request" || e["id"] != id {
			t.Fatalf("metadata %d deep: %v, want bad_request for %s", d, e, id)
		}
		c.send(map[string]any{"type": "context", "set": deep(d)})
		if e := c.readType("error"); e["code"] != "bad_request" {
			t.Fatalf("context %d deep: %v, want bad_request", d, e)
		}
	}
	c.send(map[string]any{"type": "ping", "id": "still-open"})
	if p := c.readType("pong"); p["id"] != "still-open" {
		t.Fatalf("pong %v", p)
	}
	if s := n.snapshot(t, alice, sid); s.LastSeq != 2 || !sameJSON(t, s.Context, map[string]any{"goal": "keep me"}) {
		t.Fatalf("refused frames changed the session: last_seq %d, context %v", s.LastSeq, s.Context)
	}

	// Exactly at the limit: accepted, stored, and readable ever after.
	md, cx := deep(wal.MaxValueDepth), deep(wal.MaxValueDepth)
	c.send(map[string]any{"type": "send", "id": "at-limit", "content": "deep but fine", "metadata": md})
	seq := c.ackOf("at-limit")
	if m := c.message(seq, "user"); !sameJSON(t, withoutID(obj(t, m["metadata"])), md) {
		t.Fatalf("metadata at the limit came back as %v", m["metadata"])
	}
	c.message(seq+1, "agent")
	c.send(map[string]any{"type": "context", "set": cx})
	wantCx := map[string]any{"goal": "keep me", "top": cx["top"]}
	if f := c.readType("context"); !sameJSON(t, f["context"], wantCx) {
		t.Fatalf("context at the limit: %v", f["context"])
	}
	c.closeNow()
	n.waitStatus(t, alice, sid, "interrupted")

	check := func(n *node, lastSeq uint64) {
		t.Helper()
		r := dial(t, n.URL)
		s, b := r.resume(alice, sid, 0)
		checkSession(t, s, true, "resumed", lastSeq, 300)
		if !sameJSON(t, s["context"], wantCx) {
			t.Fatalf("resumed context %v", s["context"])
		}
		msgs := b["messages"].([]any)
		if got := batchSeqs(t, b); !seqsEq(got, span(1, lastSeq)) {
			t.Fatalf("replay %v", got)
		}
		if m := obj(t, msgs[seq-1]); !sameJSON(t, withoutID(obj(t, m["metadata"])), md) {
			t.Fatalf("replayed metadata %v", m["metadata"])
		}
		next := fmt.Sprintf("after-%d", lastSeq)
		if r.chat(next, "goes on") != lastSeq+1 {
			t.Fatalf("send after the resume not stored as %d", lastSeq+1)
		}
		r.closeNow()
		snap := n.waitStatus(t, alice, sid, "interrupted")
		if !sameJSON(t, snap.Context, wantCx) || snap.LastSeq != lastSeq+2 {
			t.Fatalf("snapshot: context %v, last_seq %d", snap.Context, snap.LastSeq)
		}
		// Another user probing the id: not_found, like an unknown id.
		m := dial(t, n.URL)
		if s := m.hello(bob, sid, 0); s["reason"] != "not_found" || s["session_id"] == sid {
			t.Fatalf("bob probing alice's session: %v", s)
		}
		var body map[string]any
		if code := getJSON(t, n.HTTP+"/v1/sessions/"+sid, bob, &body); code != http.StatusNotFound {
			t.Fatalf("bob's snapshot of alice's session: %d %v", code, body)
		}
	}
	// From the actor's memory, then from the log alone after a restart.
	check(n, 4)
	_ = n.Close()
	check(startNode(t, nodetest.Options{Dir: n.Dir}), 6)
}

// rawEdit stops n, edits its Pebble store directly (as a disk fault or a
// bug would), and starts a node on the same directory with o.
func rawEdit(t *testing.T, n *node, o nodetest.Options, edit func(db *pebble.DB)) *node {
	t.Helper()
	_ = n.Close()
	db, err := pebble.Open(n.Dir, &pebble.Options{FormatMajorVersion: wal.FormatVersion, Logger: pebbleQuiet{}})
	if err != nil {
		t.Fatalf("pebble.Open(%s): %v", n.Dir, err)
	}
	edit(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	o.Dir = n.Dir
	return startNode(t, o)
}

// pebbleQuiet keeps Pebble's recovery chatter out of the test output.
type pebbleQuiet struct{}

func (pebbleQuiet) Infof(string, ...any)      {}
func (pebbleQuiet) Errorf(string, ...any)     {}
func (pebbleQuiet) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// Keys of the store's layout (wal/doc.go).
func headerKey(sid string) []byte  { return append([]byte{'m'}, sid...) }
func contextKey(sid string) []byte { return append([]byte{'c'}, sid...) }
func entryKey(sid string, seq uint64) []byte {
	k := append(append([]byte{'e'}, sid...), 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

func rawSet(t *testing.T, db *pebble.DB, key, val []byte) {
	t.Helper()
	if err := db.Set(key, val, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func rawGet(t *testing.T, db *pebble.DB, key []byte) []byte {
	t.Helper()
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...)
}

// TestCorruptStoredData writes garbage into a stopped node's log — an
// entry nested far beyond what the reader accepts (what the original
// attack left behind), an undecodable context, an undecodable actor
// state, and for a second session an undecodable header — and checks
// that the owner still resumes and uses the first session, nobody else
// sees either, /metrics counts the bad records, and the retention sweep
// deletes both once their time has come.
func TestCorruptStoredData(t *testing.T) {
	t.Parallel()
	opts := nodetest.Options{ManualClock: true}
	n := startNode(t, opts)
	alice, bob := nodetest.Token(t, "alice"), nodetest.Token(t, "bob")

	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(alice, "", 0), false, "new", 0, 300)
	for i := range 3 {
		c.chat(fmt.Sprint("s", i), fmt.Sprint("entry ", i))
	}
	c.send(map[string]any{"type": "context", "set": map[string]any{"goal": "lost to the fault"}})
	c.readType("context")
	c.closeNow()
	n.waitStatus(t, alice, sid, "interrupted")

	c2 := dial(t, n.URL)
	bad := checkSession(t, c2.hello(alice, "", 0), false, "new", 0, 300)
	c2.chat("t0", "doomed")
	c2.closeNow()
	n.waitStatus(t, alice, bad, "interrupted")

	tooDeep := make([]byte, 0, 102)
	for range 100 {
		tooDeep = append(tooDeep, 0x91) // an array of one element…
	}
	tooDeep = append(tooDeep, 0xc0) // …around a nil, 100 levels deep
	garbage := []byte{0xc1, 0xff, 0x00, 0x13, 0x37}
	n = rawEdit(t, n, opts, func(db *pebble.DB) {
		rawSet(t, db, entryKey(sid, 2), tooDeep)
		rawSet(t, db, contextKey(sid), garbage)
		h, err := wal.DecodeHeader(rawGet(t, db, headerKey(sid)))
		if err != nil {
			t.Fatal(err)
		}
		h.State = garbage
		hb, err := msgpack.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		rawSet(t, db, headerKey(sid), hb)
		rawSet(t, db, headerKey(bad), garbage)
	})

	// The owner resumes: every seq is there (the bad one as a stand-in),
	// the unreadable context starts afresh, and the session takes sends.
	r := dial(t, n.URL)
	s, b := r.resume(alice, sid, 0)
	checkSession(t, s, true, "resumed", 6, 300)
	if len(obj(t, s["context"])) != 0 || s["pending_tool_call"] != nil {
		t.Fatalf("session frame after the fault: %v", s)
	}
	// (Not batchSeqs: the stand-in has no time, its timestamp is 0.)
	msgs := b["messages"].([]any)
	var got []uint64
	for _, m := range msgs {
		got = append(got, num(t, obj(t, m)["seq"]))
	}
	if !seqsEq(got, span(1, 6)) || num(t, b["first_seq"]) != 1 || num(t, b["last_seq"]) != 6 {
		t.Fatalf("replay after the fault: %v (first %v last %v)", got, b["first_seq"], b["last_seq"])
	}
	if m := obj(t, msgs[1]); m["role"] != "system" || obj(t, m["metadata"])[wal.Unreadable] != true {
		t.Fatalf("the unreadable entry came back as %v", m)
	}
	if m := obj(t, msgs[2]); m["content"] != "entry 1" {
		t.Fatalf("a readable entry after the bad one: %v", m)
	}
	if r.chat("s3", "after the fault") != 7 {
		t.Fatal("the session does not take sends after the fault")
	}
	if snap := n.snapshot(t, alice, sid); snap.LastSeq != 8 {
		t.Fatalf("snapshot after the fault: last_seq %d", snap.LastSeq)
	}
	r.closeNow()
	n.waitStatus(t, alice, sid, "interrupted")

	// Nobody else sees either session; the one whose header is unreadable
	// cannot be proven anyone's, so its owner gets not_found too.
	for _, probe := range []struct {
		who, tok, sid string
	}{{"bob", bob, sid}, {"bob", bob, bad}, {"alice", alice, bad}} {
		m := dial(t, n.URL)
		if s := m.hello(probe.tok, probe.sid, 0); s["reason"] != "not_found" || s["session_id"] == probe.sid {
			t.Fatalf("%s probing %s: %v", probe.who, probe.sid, s)
		}
		m.closeNow()
		if code := getJSON(t, n.HTTP+"/v1/sessions/"+probe.sid, probe.tok, nil); code != http.StatusNotFound {
			t.Fatalf("%s's snapshot of %s: %d, want 404", probe.who, probe.sid, code)
		}
	}
	// Entry, context, state and header: four bad records, at least.
	if v, ok := n.metric(t, "tether_corrupt_records_total"); !ok || v < 4 {
		t.Fatalf("tether_corrupt_records_total = %v (present %v), want ≥ 4", v, ok)
	}

	// Retention: the window (5m) and then the retention (1h) pass; the
	// sweep deletes both sessions.
	gone := func(id string) bool {
		_, err := n.Log.Header(id)
		return errors.Is(err, wal.ErrNotFound)
	}
	deadline := time.Now().Add(waitFor)
	for !gone(sid) || !gone(bad) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v of clock the sweep left the session (%v) or the one with a bad header (%v)",
				time.Until(n.Clock.Now()).Round(time.Minute), !gone(sid), !gone(bad))
		}
		n.Clock.Advance(5 * time.Minute)
		time.Sleep(20 * time.Millisecond) // let the timers' goroutines run: polling, not a wait for an outcome
	}
	t.Logf("both deleted after %v of clock", time.Until(n.Clock.Now()).Round(time.Minute))
	if v, _ := n.metric(t, "tether_wal_sessions_deleted_total"); v < 2 {
		t.Fatalf("tether_wal_sessions_deleted_total = %v, want ≥ 2", v)
	}
}
