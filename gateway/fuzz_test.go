package gateway_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/gateway/wire"
)

// seedFrames are valid and nearly valid client frames.
var seedFrames = []string{
	`{"type":"hello","token":"x","session_id":"ABC","last_seq":17,"stream":{"seq":18,"part":4}}`,
	`{"type":"send","id":"c-7f3a","content":"text","metadata":{}}`,
	`{"type":"send","id":"c-1","content":"text","metadata":{"a":[1,2,{"b":null}],"id":"spoof"}}`,
	`{"type":"history","before_seq":120,"limit":50}`,
	`{"type":"history","limit":-1}`,
	`{"type":"context","set":{"goal":"compare two laptops","lang":"zh"}}`,
	`{"type":"context","set":{"sensitive":true}}`,
	`{"type":"context","set":null}`,
	`{"type":"complete"}`,
	`{"type":"nope"}`,
	`{"type":5}`,
	`{"type":"send","id":1}`,
	`{"type":"history","before_seq":-1}`,
	`{"type":"history","before_seq":1e30}`,
	`{"type":"send","id":"x","content":"\u0000\ud800"}`,
	`{"TYPE":"send","ID":"x","Content":"y"}`,
	`{"type":"send","type":"history"}`,
	`null`, `[]`, `"hello"`, `1`, `{}`, ``, `{`,
}

// decodeClientFrame decodes b the way the gateway's reader does. It
// reports whether the frame is usable (valid JSON frame with a type).
func decodeClientFrame(b []byte) (wire.ClientFrame, bool) {
	f, err := gateway.DecodeFrame(b)
	return f, err == nil
}

func FuzzClientFrame(f *testing.F) {
	for _, s := range seedFrames {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, ok := decodeClientFrame(b)
		if !ok {
			return
		}
		// A decoded frame survives a round trip through the wire form.
		out, err := json.Marshal(fr)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", fr, err)
		}
		back, ok := decodeClientFrame(out)
		if !ok || back.Type != fr.Type || back.ID != fr.ID || back.Content != fr.Content || back.LastSeq != fr.LastSeq {
			t.Fatalf("round trip of %q: %+v → %s → %+v", b, fr, out, back)
		}
	})
}

// mutate returns a random variation of a seed frame.
func mutate(r *rand.Rand, seeds []string) []byte {
	b := []byte(seeds[r.IntN(len(seeds))])
	if r.IntN(2) == 0 {
		return mutateJSON(r, b)
	}
	switch r.IntN(7) {
	case 0: // flip bytes
		for range 1 + r.IntN(3) {
			if len(b) > 0 {
				b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
			}
		}
	case 1: // truncate
		if len(b) > 0 {
			b = b[:r.IntN(len(b))]
		}
	case 2: // random bytes
		b = make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
	case 3: // random printable JSON-ish text
		const alpha = `{}[]":,0123456789abcdefghijklmnopqrstuvwxyz \\-.`
		b = make([]byte, r.IntN(80))
		for i := range b {
			b[i] = alpha[r.IntN(len(alpha))]
		}
	case 4: // a send with a random id and content
		id := strings.Repeat("i", r.IntN(70))
		content := strings.Repeat("c", r.IntN(200))
		b = fmt.Appendf(nil, `{"type":"send","id":%q,"content":%q,"metadata":{"n":%d}}`, id, content, r.IntN(100))
	case 5: // a valid frame of a random kind
		kinds := []string{"send", "history", "context", "hello", "weird", ""}
		b = fmt.Appendf(nil, `{"type":%q,"id":"k%d","content":"v","limit":%d,"before_seq":%d,"set":{"k":%d}}`,
			kinds[r.IntN(len(kinds))], r.IntN(1000), r.IntN(400)-100, r.IntN(50), r.IntN(9))
	default: // as is
	}
	return b
}

// randomValue is a JSON value of a random kind.
func randomValue(r *rand.Rand, depth int) any {
	switch r.IntN(10) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return r.IntN(1000) - 500
	case 3:
		return r.Float64() * 1e20
	case 4:
		return strings.Repeat("x", r.IntN(80))
	case 5:
		return []string{"send", "history", "context", "complete", "hello", "message", "ack"}[r.IntN(7)]
	case 6:
		return "é\u0000😀 \uFFFD"
	case 7:
		if depth > 2 {
			return "deep"
		}
		return []any{randomValue(r, depth+1), randomValue(r, depth+1)}
	default:
		if depth > 2 {
			return map[string]any{}
		}
		return map[string]any{"k": randomValue(r, depth+1), "sensitive": randomValue(r, depth+1)}
	}
}

// mutateJSON changes, adds or removes fields of a JSON object frame.
func mutateJSON(r *rand.Rand, b []byte) []byte {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil || m == nil {
		m = map[string]any{"type": "send"}
	}
	if r.IntN(3) == 0 {
		m = map[string]any{"type": []string{"send", "history", "context"}[r.IntN(3)], "id": fmt.Sprintf("j%d", r.IntN(1000)), "content": "c"}
	}
	keys := []string{"type", "id", "content", "metadata", "before_seq", "limit", "set", "token", "session_id", "last_seq", "stream", "extra"}
	for range 1 + r.IntN(3) {
		k := keys[r.IntN(len(keys))]
		if r.IntN(4) == 0 {
			delete(m, k)
		} else {
			m[k] = randomValue(r, 0)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}

// TestRandomFrames throws mutated frames at live connections: each frame
// is answered (or not) and a connection ends only with a protocol close
// code, never 1011; the session's log stays gap-free and the node keeps
// serving other clients.
func TestRandomFrames(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{MaxFrame: 4096, NoRateLimit: true}})
	tok := nodetest.Token(t, "fuzzer")
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("TETHER_FUZZ_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (set TETHER_FUZZ_SEED to repeat)", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	seeds := append([]string(nil), seedFrames...)
	allowed := map[int]bool{1000: true, 1003: true, 1007: true, 1008: true, 1009: true}

	var sid string
	var c *wsc
	connect := func() {
		c = dial(t, n.URL)
		if sid == "" {
			sid = checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
			return
		}
		s := c.hello(tok, sid, 0)
		if s["resumed"] != true {
			// a random complete ended the session: go on with the new one
			sid = str(t, s["session_id"])
			return
		}
		c.readType("history_batch")
	}
	connect()
	closes := map[int]int{}
	for i := range 400 {
		frame := mutate(r, seeds)
		mt := websocket.TextMessage
		if r.IntN(40) == 0 {
			mt = websocket.BinaryMessage
		}
		if r.IntN(60) == 0 {
			frame = []byte(`{"type":"send","id":"big","content":"` + strings.Repeat("B", 5000) + `"}`)
		}
		if err := c.ws.WriteMessage(mt, frame); err != nil {
			t.Fatalf("frame %d: write: %v", i, err)
		}
		// A probe right after tells apart "answered" from "closed".
		probe := fmt.Sprintf("probe-%d", i)
		_ = c.ws.WriteJSON(map[string]any{"type": "history", "limit": 1, "before_seq": 1, "probe": probe})
		for {
			_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, b, err := c.ws.ReadMessage()
			if err != nil {
				ce, ok := err.(*websocket.CloseError)
				if !ok {
					t.Fatalf("frame %d %q: connection ended without a close frame: %v", i, frame, err)
				}
				if !allowed[ce.Code] {
					t.Fatalf("frame %d %q: close %d", i, frame, ce.Code)
				}
				closes[ce.Code]++
				connect()
				break
			}
			var f map[string]any
			if err := json.Unmarshal(b, &f); err != nil {
				t.Fatalf("server frame is not JSON: %q", b)
			}
			if f["type"] == "error" && f["code"] == "internal" {
				t.Fatalf("frame %d %q: internal error %v", i, frame, f)
			}
			if f["type"] == "history_batch" && num(t, f["first_seq"]) == 0 && len(f["messages"].([]any)) == 0 {
				break // the probe's answer: the frame was handled
			}
		}
	}
	t.Logf("closes: %v", closes)

	// The node serves another user normally.
	o := dial(t, n.URL)
	checkSession(t, o.hello(nodetest.Token(t, "bystander"), "", 0), false, "new", 0, 300)
	o.chat("ok", "still serving")

	// The fuzzed session's log is gap-free and every user entry carries
	// its send id.
	last := n.snapshot(t, tok, sid).LastSeq
	c.closeNow()
	rc := dial(t, n.URL)
	rc.resume(tok, sid, last)
	before := last + 1
	for before > 1 {
		h := rc.history(before, 200)
		got := batchSeqs(t, h)
		if len(got) == 0 || got[len(got)-1] != before-1 {
			t.Fatalf("history before %d: %v", before, got)
		}
		for _, m := range h["messages"].([]any) {
			if e := obj(t, m); e["role"] == "user" && str(t, obj(t, e["metadata"])["id"]) == "" {
				t.Fatalf("user entry without its send id: %v", e)
			}
		}
		before = got[0]
	}
}
