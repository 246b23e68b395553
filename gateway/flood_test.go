package gateway_test

// Issue 6, item 1: a client that never reads its socket and floods
// `history` (or `context`) cannot make a node hold more than its byte
// budget, is closed with a real 1013 close frame, and every such frame
// counts against the connection's rate.

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// bigEntry is the content of one send in the flood tests: just under
// the default --max-content, so every entry of the session is ~32 KB.
var bigEntry = strings.Repeat("x", 32_000)

// fillBig makes a session of 2*sends entries of ~32 KB each (the echo
// engine repeats every send) and returns its id and last seq; c stays
// attached to it.
func fillBig(t *testing.T, c *wsc, tok string, sends int) (string, uint64) {
	t.Helper()
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
	// At most window sends in flight: the echoes of all of them at once
	// (64 KB each) would pass the client's queue budget whenever the
	// client's socket buffers take less than the rest, and get it closed
	// with 1013 (this helper is not the test of that).
	const window = 8
	agents := 0
	for i := range sends {
		c.sendMsg(fmt.Sprintf("f%03d", i), bigEntry)
		for i+1-agents >= window || (i == sends-1 && agents < sends) {
			f := c.read()
			switch {
			case f["type"] == "error":
				t.Fatalf("filling the session: %v", f)
			case f["type"] == "message" && f["role"] == "agent":
				agents++
			}
		}
	}
	return sid, uint64(2 * sends)
}

// readRaw reads the next frame as bytes and its type.
func (c *wsc) readRaw() ([]byte, string) {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		c.t.Fatalf("server frame is not JSON: %.200q", b)
	}
	return b, head.Type
}

// heapSampler records the largest live Go heap (after a GC) seen while it
// runs: in-process, the node's memory is this test binary's heap.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak uint64
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func startHeapSampler() *heapSampler {
	s := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(20 * time.Millisecond) // sampling rate, not a wait
		defer tick.Stop()
		for {
			h := liveHeap()
			s.mu.Lock()
			s.peak = max(s.peak, h)
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *heapSampler) finish() uint64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// TestHistoryFloodBounded is the attack of issue 6 item 1: a client that
// does not read sends 300 `history` frames (limit 200) over a session of
// ~32 KB entries. Unbounded, that is 300 pages of up to 6.4 MB queued for
// it; the node must hold no more than its byte budget (4 MiB) plus a page
// or two, close the client with a 1013 close frame the client reads once
// it reads again, and keep the session intact. Not parallel: the heap it
// measures is the whole test binary's.
func TestHistoryFloodBounded(t *testing.T) {
	n := startNode(t, nodetest.Options{
		// No rate limit: the budget alone must bound the flood. A long
		// write timeout: the writer stuck on the non-reading client must
		// still be there, with the close frame queued, when it reads.
		Gateway: gateway.Config{NoRateLimit: true, WriteTimeout: 2 * time.Minute},
		Actor:   actor.Config{MaxTurns: 1000},
	})
	tok := nodetest.Token(t, "alice")
	filler := dial(t, n.URL)
	sid, last := fillBig(t, filler, tok, 120)

	// One page is bounded in bytes as well as entries: 200 entries of
	// 32 KB would be 6.4 MB; MaxBatchBytes (default 1 MiB) keeps the
	// newest that fit, and omitted counts the older ones.
	filler.send(map[string]any{"type": "history", "limit": 200})
	raw, typ := filler.readRaw()
	if typ != "history_batch" {
		t.Fatalf("history answered %.200s", raw)
	}
	var page struct {
		Messages []json.RawMessage `json:"messages"`
		FirstSeq uint64            `json:"first_seq"`
		LastSeq  uint64            `json:"last_seq"`
		Omitted  uint64            `json:"omitted"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		t.Fatal(err)
	}
	const maxBatch = 1 << 20
	if len(raw) > maxBatch+64<<10 || len(page.Messages) >= 200 || len(page.Messages) < 10 {
		t.Fatalf("a history page of 200 × 32 KB entries is %d bytes with %d entries, want ≤ ~1 MiB", len(raw), len(page.Messages))
	}
	if page.LastSeq != last || page.FirstSeq != last-uint64(len(page.Messages))+1 || page.Omitted != page.FirstSeq-1 {
		t.Fatalf("page first %d last %d omitted %d with %d entries (session last %d)", page.FirstSeq, page.LastSeq, page.Omitted, len(page.Messages), last)
	}
	t.Logf("one page: %d entries, %d bytes, omitted %d", len(page.Messages), len(raw), page.Omitted)
	filler.closeNow()
	n.waitStatus(t, tok, sid, "interrupted")

	// The attacker: a small receive buffer, resumes, then never reads.
	c := dialSmall(t, n.URL, 16<<10)
	c.resume(tok, sid, last)
	base := liveHeap()
	sampler := startHeapSampler()
	const floods = 300
	req := []byte(`{"type":"history","limit":200}`)
	for i := range floods {
		_ = c.ws.SetWriteDeadline(time.Now().Add(20 * time.Second))
		if err := c.ws.WriteMessage(websocket.TextMessage, req); err != nil {
			t.Logf("the server stopped taking frames after %d: %v", i, err)
			break
		}
	}
	actortest.Eventually(t, "the flooding client to be cut off (tether_slow_clients_total)", func() bool {
		v, _ := n.metric(t, "tether_slow_clients_total")
		return v >= 1
	})
	after := liveHeap()
	peak := max(sampler.finish(), after)
	grew := int64(peak) - int64(base)
	t.Logf("live heap: %d MiB before, peak %d MiB during, %d MiB after the cut (+%d MiB)", base>>20, peak>>20, after>>20, grew>>20)
	// The budget is 4 MiB; a page in the writer's hands and its encoding
	// add a few more. 64 MiB is generous; 300 unbounded pages are ≥ 300 MiB.
	if grew > 64<<20 {
		t.Fatalf("a client that does not read made the node's heap grow by %d MiB (budget 4 MiB)", grew>>20)
	}

	// The client reads again: what was already on its way, then a real
	// 1013 close frame.
	var got, pages int
	_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			ce, ok := err.(*websocket.CloseError)
			if !ok {
				t.Fatalf("after %d pages: want a 1013 close frame, got %v", pages, err)
			}
			if ce.Code != 1013 {
				t.Fatalf("closed with %d (%s), want 1013", ce.Code, ce.Text)
			}
			break
		}
		got += len(b)
		pages++
	}
	t.Logf("the client read %d pages (%d MiB) before the 1013", pages, got>>20)
	if pages >= floods || got > 64<<20 {
		t.Fatalf("the client was sent %d pages, %d MiB: the budget did not stop the flood", pages, got>>20)
	}

	// The session is untouched and resumes.
	n.waitStatus(t, tok, sid, "interrupted")
	r := dial(t, n.URL)
	s, b := r.resume(tok, sid, last)
	checkSession(t, s, true, "resumed", last, 300)
	if len(batchSeqs(t, b)) != 0 {
		t.Fatal("a resume at the last seq replayed entries")
	}
}

// TestFramesCountAgainstRate: history and context frames count against
// the connection's rate like sends (ping does not: TestPingPong), so one
// connection cannot make a node build pages or fsync contexts without
// limit. Refused frames do nothing.
func TestFramesCountAgainstRate(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{Rate: 5}}) // bursts of 10
	tok := nodetest.Token(t, "alice")
	c := dial(t, n.URL)
	sid := checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)

	const frames = 40
	count := func(frame map[string]any, answer string) (answered, limited int) {
		t.Helper()
		for range frames {
			c.send(frame)
		}
		for answered+limited < frames {
			f := c.read()
			switch {
			case f["type"] == answer:
				answered++
			case f["type"] == "error" && f["code"] == "rate_limited":
				if _, ok := f["id"]; ok {
					t.Fatalf("rate_limited for a %s frame names a send: %v", answer, f)
				}
				limited++
			default:
				t.Fatalf("unexpected answer to %v: %v", frame, f)
			}
		}
		return answered, limited
	}
	// 40 frames at once against 5/s, bursts of 10: most are refused; the
	// few let through are the burst plus what the rate refilled meanwhile.
	start := time.Now()
	pages, limited := count(map[string]any{"type": "history", "limit": 200}, "history_batch")
	if limited == 0 || pages > 10+int(5*time.Since(start).Seconds())+1 {
		t.Fatalf("40 history frames at once: %d answered, %d rate_limited", pages, limited)
	}
	// The same for context writes, each of which would be an fsync.
	start = time.Now()
	writes, limited := count(map[string]any{"type": "context", "set": map[string]any{"k": 1}}, "context")
	if limited == 0 || writes > 10+int(5*time.Since(start).Seconds())+1 {
		t.Fatalf("40 context frames at once: %d answered, %d rate_limited", writes, limited)
	}
	// Within the rate both kinds are served again.
	for _, f := range []map[string]any{{"type": "history", "limit": 1}, {"type": "context", "set": map[string]any{"k": 1}}} {
		actortest.Eventually(t, fmt.Sprintf("the rate to let %v through", f["type"]), func() bool {
			c.send(f)
			a := c.read()
			if a["type"] == "error" && a["code"] == "rate_limited" {
				return false
			}
			if a["type"] != map[string]string{"history": "history_batch", "context": "context"}[f["type"].(string)] {
				t.Fatalf("%v answered %v", f, a)
			}
			return true
		})
	}
	// Nothing a refused frame asked for happened: the log has no entry.
	if s := n.snapshot(t, tok, sid); s.LastSeq != 0 || !jsonEq(s.Context, map[string]any{"k": 1}) {
		t.Fatalf("after the flood: last_seq %d, context %v", s.LastSeq, s.Context)
	}
}
