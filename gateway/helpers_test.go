package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway/wire"
)

// quiet is the logger of test components (actortest.Quiet).
var quiet = actortest.Quiet()

// httpc keeps no idle connections, so no client goroutine outlives a test
// (goleak checks the package).
var httpc = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 15 * time.Second}

// waitFor is how long eventually polls before failing.
const waitFor = 15 * time.Second

// signed signs claims with method and key (jwt.UnsafeAllowNoneSignatureType
// for alg none).
func signed(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// num reads a JSON number out of a decoded frame.
func num(t *testing.T, v any) uint64 {
	t.Helper()
	f, ok := v.(float64)
	if !ok || f < 0 || f != math.Trunc(f) {
		t.Fatalf("want a non-negative integer, got %#v", v)
	}
	return uint64(f)
}

// str reads a JSON string out of a decoded frame.
func str(t *testing.T, v any) string {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("want a string, got %#v", v)
	}
	return s
}

// obj reads a JSON object out of a decoded frame.
func obj(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("want an object, got %#v", v)
	}
	return m
}

// wantKeys checks that m has exactly keys (no more, no fewer).
func wantKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: field %q missing in %v", what, k, m)
		}
	}
}

func jsonEq(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// ---- client helpers ----

// sendMsg sends a send frame.
func (c *wsc) sendMsg(id, content string) {
	c.t.Helper()
	c.send(map[string]any{"type": "send", "id": id, "content": content})
}

// ackOf reads the next frame, which must be the ack of id; it returns the seq.
func (c *wsc) ackOf(id string) uint64 {
	c.t.Helper()
	a := c.readType("ack")
	if a["id"] != id {
		c.t.Fatalf("want ack of %q, got %v", id, a)
	}
	return num(c.t, a["seq"])
}

// message reads the next frame, which must be a message with seq and role.
func (c *wsc) message(seq uint64, role string) map[string]any {
	c.t.Helper()
	m := c.readType("message")
	checkMessage(c.t, m, seq, role)
	return m
}

// checkMessage checks one message (a frame or a history_batch element).
func checkMessage(t *testing.T, m map[string]any, seq uint64, role string) {
	t.Helper()
	wantKeys(t, "message", m, "seq", "role", "content", "timestamp", "metadata")
	if typ, ok := m["type"]; ok && typ != "message" {
		t.Errorf("message type %v", typ)
	}
	if got := num(t, m["seq"]); got != seq {
		t.Fatalf("want seq %d, got message %v", seq, m)
	}
	if m["role"] != role {
		t.Fatalf("want role %s at seq %d, got %v", role, seq, m)
	}
	ts, ok := m["timestamp"].(float64)
	if !ok || math.Abs(ts-float64(time.Now().UnixNano())/1e9) > 3600 {
		t.Errorf("timestamp %v is not Unix seconds near now", m["timestamp"])
	}
	obj(t, m["metadata"])
	str(t, m["content"])
}

// chat sends content as id and reads ack, user message and the echo
// engine's reply; it returns the user entry's seq.
func (c *wsc) chat(id, content string) uint64 {
	c.t.Helper()
	c.sendMsg(id, content)
	seq := c.ackOf(id)
	u := c.message(seq, "user")
	if u["content"] != content || obj(c.t, u["metadata"])["id"] != id {
		c.t.Fatalf("user message %v does not carry send %q / %q", u, id, content)
	}
	a := c.message(seq+1, "agent")
	if a["content"] != "Agent reply: "+content {
		c.t.Fatalf("agent reply %v", a)
	}
	return seq
}

// resume says hello for sid and reads the session and history_batch frames.
func (c *wsc) resume(tok, sid string, lastSeq uint64) (map[string]any, map[string]any) {
	c.t.Helper()
	s := c.hello(tok, sid, lastSeq)
	if s["resumed"] != true || s["reason"] != "resumed" {
		c.t.Fatalf("want a resume, got %v", s)
	}
	return s, c.readType("history_batch")
}

// history asks for a history page.
func (c *wsc) history(before uint64, limit int) map[string]any {
	c.t.Helper()
	f := map[string]any{"type": "history", "limit": limit}
	if before > 0 {
		f["before_seq"] = before
	}
	c.send(f)
	return c.readType("history_batch")
}

// batchSeqs checks a history_batch's framing and returns its seqs.
func batchSeqs(t *testing.T, b map[string]any) []uint64 {
	t.Helper()
	wantKeys(t, "history_batch", b, "type", "messages", "first_seq", "last_seq", "omitted", "summary")
	raw, ok := b["messages"].([]any)
	if !ok {
		t.Fatalf("messages is not an array: %v", b)
	}
	var seqs []uint64
	for _, r := range raw {
		m := obj(t, r)
		seqs = append(seqs, num(t, m["seq"]))
		checkMessage(t, m, seqs[len(seqs)-1], str(t, m["role"]))
	}
	first, last := num(t, b["first_seq"]), num(t, b["last_seq"])
	if len(seqs) == 0 {
		if first != 0 || last != 0 {
			t.Fatalf("empty batch with first_seq %d last_seq %d", first, last)
		}
		return seqs
	}
	if first != seqs[0] || last != seqs[len(seqs)-1] {
		t.Fatalf("first_seq %d / last_seq %d do not match messages %v", first, last, seqs)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("batch seqs not gap-free: %v", seqs)
		}
	}
	return seqs
}

func span(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func seqsEq(a, b []uint64) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// closeNow drops the TCP connection without a close frame.
func (c *wsc) closeNow() { c.ws.Close() }

// closeClean sends a 1000 close and waits for the server's answer.
func (c *wsc) closeClean() {
	c.t.Helper()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
	_ = c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, _, err := c.ws.ReadMessage(); err != nil {
			break
		}
	}
	c.ws.Close()
}

// expectClose reads until the close and checks its code; it returns the
// frames read on the way.
func (c *wsc) expectClose(code int) []map[string]any {
	c.t.Helper()
	got, frames := c.closeCode()
	if got != code {
		c.t.Fatalf("want close %d, got %d (frames %v)", code, got, frames)
	}
	return frames
}

// dialSmall dials with a small, fixed receive buffer so that a client that
// does not read is felt by the server quickly.
func dialSmall(t *testing.T, url string, rcvbuf int) *wsc {
	t.Helper()
	d := websocket.Dialer{NetDialContext: (&net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
		})
		if err != nil {
			return err
		}
		return serr
	}}).DialContext, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Cleanup(func() { ws.Close() })
	return &wsc{t: t, ws: ws}
}

// ---- HTTP helpers ----

// snapshot fetches GET /v1/sessions/{sid} as tok and wants 200.
func (n *node) snapshot(t *testing.T, tok, sid string) wire.Snapshot {
	t.Helper()
	var s wire.Snapshot
	if code := getJSON(t, n.HTTP+"/v1/sessions/"+sid, tok, &s); code != http.StatusOK {
		t.Fatalf("snapshot of %s: status %d", sid, code)
	}
	return s
}

// waitStatus polls the snapshot until the session has status.
func (n *node) waitStatus(t *testing.T, tok, sid, status string) wire.Snapshot {
	t.Helper()
	var s wire.Snapshot
	actortest.Eventually(t, "session "+sid+" to be "+status, func() bool {
		s = n.snapshot(t, tok, sid)
		return s.Status == status
	})
	return s
}

// do makes a request and returns status, headers and body.
func do(t *testing.T, method, url, auth string, body io.Reader) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// metric returns the value of the sample named exactly name (with its
// labels, as the text format writes them), or ok=false.
func (n *node) metric(t *testing.T, name string) (float64, bool) {
	t.Helper()
	code, _, body := do(t, "GET", n.HTTP+"/metrics", "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		if ok && k == name {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}
