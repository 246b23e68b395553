package gateway_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// liveSession makes a session with two entries and returns it interrupted.
func liveSession(t *testing.T, n *node, tok string) string {
	t.Helper()
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.chat("base", "base")
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")
	return sid
}

// intact checks that sid still has exactly lastSeq entries and resumes.
func intact(t *testing.T, n *node, tok, sid string, lastSeq uint64) {
	t.Helper()
	s := n.waitStatus(t, tok, sid, "interrupted")
	if s.LastSeq != lastSeq {
		t.Fatalf("last_seq %d after bad input, want %d", s.LastSeq, lastSeq)
	}
	c := dial(t, n.URL)
	_, b := c.resume(tok, sid, 0)
	if got := batchSeqs(t, b); !seqsEq(got, span(1, lastSeq)) {
		t.Fatalf("log after bad input: %v", got)
	}
	// The connection works; a repeated send id stores nothing.
	c.sendMsg("base", "base")
	if c.ackOf("base") != 1 {
		t.Fatal("repeated send id got another seq")
	}
	c.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")
}

// errorThenClose checks frames (read before a close) are at most one error
// with code.
func errorThenClose(t *testing.T, what string, frames []map[string]any, code string) {
	t.Helper()
	for _, f := range frames {
		if f["type"] != "error" || f["code"] != code {
			t.Fatalf("%s: frame %v before the close, want only error %s", what, f, code)
		}
	}
}

func TestBadFirstFrame(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{HelloTimeout: 300 * time.Millisecond, MaxFrame: 1024}})
	tok := nodetest.Token(t, "alice")
	sid := liveSession(t, n, tok)
	cases := []struct {
		name  string
		mt    int
		data  string
		close int
		code  string // error frame code, "" when none is required
	}{
		{"not JSON", websocket.TextMessage, `{"type":"hello",`, 1007, "bad_request"},
		{"not UTF-8", websocket.TextMessage, "{\"type\":\"hello\",\"token\":\"\xff\xfe\"}", 1007, "bad_request"},
		{"not hello", websocket.TextMessage, `{"type":"send","id":"a","content":"b"}`, 1008, "bad_request"},
		{"no type", websocket.TextMessage, `{"token":"x"}`, 1008, "bad_request"},
		{"type not a string", websocket.TextMessage, `{"type":1}`, 1008, "bad_request"},
		{"JSON not an object", websocket.TextMessage, `[1,2,3]`, 1008, "bad_request"},
		{"too large", websocket.TextMessage, `{"type":"hello","token":"` + strings.Repeat("x", 2000) + `"}`, 1009, ""},
		{"binary", websocket.BinaryMessage, `{"type":"hello"}`, 1003, "bad_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, n.URL)
			c.raw(tc.mt, []byte(tc.data))
			frames := c.expectClose(tc.close)
			if tc.code != "" {
				errorThenClose(t, tc.name, frames, tc.code)
			} else if len(frames) != 0 {
				t.Fatalf("frames before the close: %v", frames)
			}
		})
	}
	t.Run("no hello in time", func(t *testing.T) {
		c := dial(t, n.URL)
		frames := c.expectClose(1008)
		errorThenClose(t, "no hello", frames, "bad_request")
	})
	intact(t, n, tok, sid, 2)
}

// TestHelloTimeoutCloseFrame repeats the hello timeout: every client must
// get the 1008 close frame, not a dropped TCP connection.
func TestHelloTimeoutCloseFrame(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{HelloTimeout: 100 * time.Millisecond}})
	const clients = 30
	cs := make([]*wsc, clients)
	for i := range cs {
		cs[i] = dial(t, n.URL)
	}
	got := map[string]int{}
	for _, c := range cs {
		_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, _, err := c.ws.ReadMessage()
			if err == nil {
				continue
			}
			if ce, ok := err.(*websocket.CloseError); ok {
				got[fmt.Sprint(ce.Code)]++
			} else {
				got["no close frame: "+err.Error()]++
			}
			break
		}
	}
	if got["1008"] != clients {
		t.Fatalf("hello timeout outcomes %v, want %d × 1008", got, clients)
	}
}

func TestBadTokens(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	sid := liveSession(t, n, tok)
	now := time.Now()
	hs := func(claims jwt.MapClaims) string { return signed(t, jwt.SigningMethodHS256, testSecret, claims) }
	cases := map[string]string{
		"empty":         "",
		"garbage":       "not.a.token",
		"expired":       nodetest.ExpiredToken(t, "alice"),
		"wrong secret":  mustIssue(t, []byte("wrong-secret"), "alice"),
		"alg none":      signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()}),
		"HS512":         signed(t, jwt.SigningMethodHS512, testSecret, jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()}),
		"no exp":        hs(jwt.MapClaims{"sub": "alice", "iat": now.Unix()}),
		"no sub":        hs(jwt.MapClaims{"exp": now.Add(time.Hour).Unix()}),
		"empty sub":     hs(jwt.MapClaims{"sub": "", "exp": now.Add(time.Hour).Unix()}),
		"sub too long":  hs(jwt.MapClaims{"sub": strings.Repeat("u", 129), "exp": now.Add(time.Hour).Unix()}),
		"expired 1 min": hs(jwt.MapClaims{"sub": "alice", "exp": now.Add(-time.Minute).Unix()}),
		"iat in future": hs(jwt.MapClaims{"sub": "alice", "iat": now.Add(time.Hour).Unix(), "exp": now.Add(2 * time.Hour).Unix()}),
		"tampered":      tok[:len(tok)-2] + "xx",
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			for _, target := range []string{"", sid} {
				c := dial(t, n.URL)
				h := map[string]any{"type": "hello", "token": bad}
				if target != "" {
					h["session_id"] = target
				}
				c.send(h)
				frames := c.expectClose(1008)
				if len(frames) != 1 {
					t.Fatalf("want one error frame before 1008, got %v", frames)
				}
				errorThenClose(t, name, frames, "unauthorized")
			}
		})
	}
	// Within the 30 s leeway, and at the 128-character limit: accepted.
	for name, good := range map[string]string{
		"expired 10s ago": hs(jwt.MapClaims{"sub": "alice", "exp": now.Add(-10 * time.Second).Unix()}),
		"sub 128 chars":   hs(jwt.MapClaims{"sub": strings.Repeat("u", 128), "exp": now.Add(time.Hour).Unix()}),
	} {
		c := dial(t, n.URL)
		c.send(map[string]any{"type": "hello", "token": good})
		if s := c.readType("session"); s["reason"] != "new" {
			t.Fatalf("%s: %v", name, s)
		}
	}
	intact(t, n, tok, sid, 2)
}

func TestBadFramesAfterHello(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{MaxFrame: 1024}})
	tok := nodetest.Token(t, "alice")
	sid := liveSession(t, n, tok)
	cases := []struct {
		name  string
		data  []byte
		close int
	}{
		{"not JSON", []byte(`{"type":"send"`), 1007},
		{"not UTF-8", []byte("{\"type\":\"send\",\"id\":\"a\",\"content\":\"\xc3\x28\"}"), 1007},
		{"too large", []byte(`{"type":"send","id":"a","content":"` + strings.Repeat("x", 1100) + `"}`), 1009},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, n.URL)
			c.resume(tok, sid, 2)
			c.raw(websocket.TextMessage, tc.data)
			frames := c.expectClose(tc.close)
			if tc.close == 1007 {
				if len(frames) != 1 {
					t.Fatalf("want one error frame before 1007, got %v", frames)
				}
				errorThenClose(t, tc.name, frames, "bad_request")
			}
			intact(t, n, tok, sid, 2)
		})
	}
	t.Run("too large in fragments", func(t *testing.T) {
		// A client whose write buffer is 256 bytes sends a 1.4 kB message
		// as fragments of at most 256 bytes: each under the limit, together
		// over it.
		d := websocket.Dialer{WriteBufferSize: 256, HandshakeTimeout: 10 * time.Second}
		ws, resp, err := d.Dial(n.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		t.Cleanup(func() { ws.Close() })
		c := &wsc{t: t, ws: ws}
		c.resume(tok, sid, 2)
		w, err := c.ws.NextWriter(websocket.TextMessage)
		if err != nil {
			t.Fatal(err)
		}
		payload := `{"type":"send","id":"frag","content":"` + strings.Repeat("y", 1400) + `"}`
		_, _ = w.Write([]byte(payload)) // the server may close before the end
		_ = w.Close()
		c.expectClose(1009)
		intact(t, n, tok, sid, 2)
	})
}

func TestBadSends(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	c.chat("a", "first")
	long := strings.Repeat("i", 65)
	cases := []struct {
		name  string
		frame map[string]any
		code  string
		id    any // the id the error must carry; nil: none
	}{
		{"unknown type", map[string]any{"type": "dance"}, "bad_request", nil},
		{"empty type", map[string]any{"type": ""}, "bad_request", nil},
		{"second hello", map[string]any{"type": "hello", "token": tok}, "bad_request", nil},
		{"empty id", map[string]any{"type": "send", "id": "", "content": "x"}, "bad_request", nil},
		{"missing id", map[string]any{"type": "send", "content": "x"}, "bad_request", nil},
		{"65-char id", map[string]any{"type": "send", "id": long, "content": "x"}, "bad_request", long},
		{"empty content", map[string]any{"type": "send", "id": "e1", "content": ""}, "bad_request", "e1"},
		{"missing content", map[string]any{"type": "send", "id": "e2"}, "bad_request", "e2"},
		{"content over max", map[string]any{"type": "send", "id": "big", "content": strings.Repeat("z", 32769)}, "too_large", "big"},
		{"content not a string", map[string]any{"type": "send", "id": "e3", "content": 5}, "bad_request", nil},
		{"negative history limit", map[string]any{"type": "history", "limit": -5}, "bad_request", nil},
	}
	for _, tc := range cases {
		c.send(tc.frame)
		e := c.readType("error")
		if e["code"] != tc.code {
			t.Errorf("%s: code %v, want %s", tc.name, e["code"], tc.code)
		}
		if _, ok := e["message"].(string); !ok {
			t.Errorf("%s: error without message: %v", tc.name, e)
		}
		if tc.id != nil && e["id"] != tc.id {
			t.Errorf("%s: error id %v, want %v", tc.name, e["id"], tc.id)
		}
	}
	// The connection is open and nothing was stored.
	if s := n.snapshot(t, tok, sid); s.LastSeq != 2 {
		t.Fatalf("bad sends stored entries: last_seq %d", s.LastSeq)
	}
	// The ids of refused sends are free: sent again correctly they store.
	if c.chat("big", strings.Repeat("z", 32768)) != 3 {
		t.Fatal("content of exactly max-content bytes was not stored as seq 3")
	}
	if c.chat("e1", "now with content") != 5 {
		t.Fatal("want seq 5")
	}
	// A 64-character id (counted in characters) is fine.
	if c.chat(strings.Repeat("é", 64), "multibyte id") != 7 {
		t.Fatal("want seq 7")
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{Rate: 5}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	const sends = 30
	for i := range sends {
		c.sendMsg(fmt.Sprintf("r%02d", i), fmt.Sprintf("text %d", i))
	}
	acked := map[string]uint64{}
	limited := map[string]bool{}
	agents := 0
	for len(acked)+len(limited) < sends || agents < len(acked) {
		f := c.read()
		switch f["type"] {
		case "ack":
			acked[str(t, f["id"])] = num(t, f["seq"])
		case "error":
			if f["code"] != "rate_limited" {
				t.Fatalf("unexpected error %v", f)
			}
			id := str(t, f["id"])
			if limited[id] || acked[id] != 0 {
				t.Fatalf("two verdicts for %s", id)
			}
			limited[id] = true
		case "message":
			if f["role"] == "agent" {
				agents++
			}
		}
	}
	if len(limited) == 0 || len(acked) < 10 {
		t.Fatalf("%d acked, %d rate_limited: want a burst of 10 through and some limited", len(acked), len(limited))
	}
	// Exactly the acked sends are stored.
	s := n.snapshot(t, tok, sid)
	if s.LastSeq != uint64(2*len(acked)) {
		t.Fatalf("last_seq %d with %d acked sends", s.LastSeq, len(acked))
	}
	// history counts against the same rate: ask until it is let through.
	var h map[string]any
	actortest.Eventually(t, "a history request within the rate", func() bool {
		c.send(map[string]any{"type": "history", "before_seq": 0, "limit": 200})
		f := c.read()
		if f["type"] == "error" && f["code"] == "rate_limited" && f["id"] == nil {
			return false
		}
		h = f
		return true
	})
	if h["type"] != "history_batch" {
		t.Fatalf("history answered %v", h)
	}
	stored := map[string]uint64{}
	for _, m := range h["messages"].([]any) {
		e := obj(t, m)
		if e["role"] == "user" {
			stored[str(t, obj(t, e["metadata"])["id"])] = num(t, e["seq"])
		}
	}
	if !jsonEq(stored, acked) {
		t.Fatalf("stored %v, acked %v", stored, acked)
	}
	// A limited id may be sent again later.
	var again string
	for id := range limited {
		again = id
		break
	}
	actortest.Eventually(t, "a rate-limited id to be accepted later", func() bool {
		c.sendMsg(again, "retry")
		f := c.read()
		if f["type"] == "error" {
			return false
		}
		if f["type"] != "ack" || f["id"] != again || num(t, f["seq"]) != s.LastSeq+1 {
			t.Fatalf("retry answered %v", f)
		}
		return true
	})
}

func TestDefaultRateBurst(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Actor: actor.Config{MaxTurns: 1000}})
	c := dial(t, n.URL)
	checkSession(t, c.hello(nodetest.Token(t, "alice"), "", 0), false, "new", 0, 300)
	// The default is 50/s with bursts of 100: the first 100 sent at once
	// all pass, and of 150 some are refused.
	const sends = 150
	for i := range sends {
		c.sendMsg(fmt.Sprintf("b%03d", i), "x")
	}
	acks, limited := 0, 0
	for acks+limited < sends {
		f := c.read()
		switch f["type"] {
		case "error":
			if f["code"] != "rate_limited" {
				t.Fatalf("unexpected error %v", f)
			}
			if id := str(t, f["id"]); id < "b100" {
				t.Fatalf("send %s within the burst of 100 refused", id)
			}
			limited++
		case "ack":
			acks++
		}
	}
	if limited == 0 {
		t.Fatalf("150 sends at once: none rate_limited (default rate 50/s, burst 100)")
	}
}

func TestSlowReader(t *testing.T) {
	t.Parallel()
	// Small socket buffers on both ends: the server feels the client that
	// does not read after some 100 kB instead of megabytes (and the echo
	// turns queued behind the sends stay few).
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{MaxQueueBytes: 256 << 10, NoRateLimit: true}, SendBuffer: 64 << 10})
	tok := nodetest.Token(t, "alice")
	c := dialSmall(t, n.URL, 16<<10)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)

	const sends = 400
	content := strings.Repeat("s", 30_000)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range sends {
			b := fmt.Appendf(nil, `{"type":"send","id":"s%03d","content":"%s"}`, i, content)
			_ = c.ws.SetWriteDeadline(time.Now().Add(20 * time.Second))
			if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
				return // the server closed us: expected
			}
		}
	}()
	wg.Wait()

	acked := map[string]uint64{}
	code := 0
	_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for code == 0 {
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			ce, ok := err.(*websocket.CloseError)
			if !ok {
				t.Fatalf("want a close frame, got %v", err)
			}
			code = ce.Code
			break
		}
		var f struct {
			Type string `json:"type"`
			ID   string `json:"id"`
			Seq  uint64 `json:"seq"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		if f.Type == "ack" {
			acked[f.ID] = f.Seq
		}
	}
	if code != 1013 {
		t.Fatalf("slow reader closed with %d, want 1013", code)
	}

	// All sends the server took are stored, each answered by the agent.
	n.waitStatus(t, tok, sid, "interrupted")
	users, err := n.Log.Read(sid, 1, 10_001, 10_000, false)
	if err != nil {
		t.Fatal(err)
	}
	nusers := 0
	for _, e := range users {
		if e.Role == "user" {
			nusers++
		}
	}
	if nusers == 0 || nusers == sends {
		t.Logf("note: %d of %d sends were taken", nusers, sends)
	}
	var last uint64
	start := time.Now()
	actortest.Eventually(t, fmt.Sprintf("every stored send (%d) to be answered", nusers), func() bool {
		last = n.snapshot(t, tok, sid).LastSeq
		return last == uint64(2*nusers)
	})
	t.Logf("%d sends taken, %d acks read, turns done %v after the close", nusers, len(acked), time.Since(start))

	// Resume and page the whole log over the protocol: gap-free, every
	// acked id is the user entry with its seq.
	r := dial(t, n.URL)
	s, b := r.resume(tok, sid, last)
	checkSession(t, s, true, "resumed", last, 300)
	if len(batchSeqs(t, b)) != 0 {
		t.Fatal("unexpected replay")
	}
	ids := map[string]uint64{}
	userCount := 0
	before := last + 1
	for before > 1 {
		h := r.history(before, 50)
		got := batchSeqs(t, h)
		if len(got) == 0 || got[len(got)-1] != before-1 {
			t.Fatalf("history before %d: %v", before, got)
		}
		for _, m := range h["messages"].([]any) {
			e := obj(t, m)
			if e["role"] == "user" {
				userCount++
				ids[str(t, obj(t, e["metadata"])["id"])] = num(t, e["seq"])
			}
		}
		before = got[0]
	}
	if userCount != nusers || last != uint64(2*userCount) {
		t.Fatalf("paged %d user entries, last_seq %d", userCount, last)
	}
	for id, seq := range acked {
		if ids[id] != seq {
			t.Fatalf("ack %s=%d, log has %d", id, seq, ids[id])
		}
	}
}

// TestTooBigFrameDirect: a frame far over the limit, on a direct socket
// (nothing in between reads what the server leaves unread), gets the 1009
// close frame and then an orderly end of the connection, not a reset (a
// browser shows a reset as 1006 and loses the close frame); the session
// takes sends afterwards.
func TestTooBigFrameDirect(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{MaxFrame: 4096}})
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	big := `{"type":"send","id":"big","content":"` + strings.Repeat("z", 1<<20) + `"}`
	wrote := make(chan error, 1)
	go func() { wrote <- c.ws.WriteMessage(websocket.TextMessage, []byte(big)) }()
	if code, _ := c.closeCode(); code != 1009 {
		t.Fatalf("closed with %d, want 1009", code)
	}
	if err := <-wrote; err != nil && !errors.Is(err, websocket.ErrCloseSent) {
		t.Fatalf("the server stopped reading the rest of the frame: %v", err)
	}
	_ = c.ws.NetConn().SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c.ws.NetConn())
	if err != nil {
		t.Fatalf("after the close frame the connection ended with %v, want an orderly end", err)
	}
	c2 := dial(t, n.URL)
	c2.resume(tok, sid, 0)
	c2.sendMsg("small", "fine")
	if c2.ackOf("small") != 1 {
		t.Fatal("the session does not take a send after the 1009")
	}
}
