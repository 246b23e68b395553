package main

// Reading every session back through every node, and judging it.

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tether-dev/tether/bench"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/gateway/wstest"
)

// readLog reads the client's whole session through node k: a hello with
// last_seq 0 (the nodes run with --replay-limit 1000, more than any of
// these sessions holds, so one batch is the whole log). Refusals are
// retried until limit.
func (s *sclient) readLog(k int, limit time.Duration) ([]wire.Message, error) {
	p := s.c.procs[k]
	deadline := time.Now().Add(limit)
	for {
		log, err := func() ([]wire.Message, error) {
			conn, err := wstest.DialVia(s.t, p.wsURL(), p.opts.netDial)
			if err != nil {
				return nil, fmt.Errorf("%w: dial: %w", errRefused, err)
			}
			defer conn.Drop()
			if err := conn.Write(map[string]any{"type": "hello", "token": s.tok, "session_id": s.sid, "last_seq": 0}); err != nil {
				return nil, fmt.Errorf("%w: %w", errRefused, err)
			}
			var sf frame
			for {
				select {
				case f, ok := <-conn.Frames():
					if !ok {
						return nil, fmt.Errorf("%w: connection ended: %v", errRefused, conn.Err())
					}
					switch {
					case f.Type == "error" && (f.Code == "unavailable" || f.Code == "rate_limited"):
						return nil, fmt.Errorf("%w: %s", errRefused, f.Raw)
					case f.Type == "error":
						return nil, fmt.Errorf("hello: %s", f.Raw)
					case f.Type == "session" && !f.Resumed:
						return nil, fmt.Errorf("not resumed: %s", f.Raw)
					case f.Type == "session":
						sf = f
					case f.Type == "history_batch":
						if f.Omitted != 0 || uint64(len(f.Messages)) != sf.LastSeq {
							return nil, fmt.Errorf("one batch of %d entries (omitted %d) for last_seq %d", len(f.Messages), f.Omitted, sf.LastSeq)
						}
						out := make([]wire.Message, 0, len(f.Messages))
						for _, m := range f.Messages {
							var wm wire.Message
							if err := json.Unmarshal([]byte(m.Raw), &wm); err != nil {
								return nil, err
							}
							out = append(out, wm)
						}
						return out, nil
					}
				case <-time.After(10 * time.Second):
					return nil, fmt.Errorf("%w: no history within 10s", errTimeout)
				}
			}
		}()
		if err == nil || time.Now().After(deadline) {
			return log, err
		}
		time.Sleep(backoff)
	}
}

// verify reads every client's session back through each of nodes and
// fails the test for every broken promise: bench.Verifier, fed with what
// the client was shown and acked, judges each read (an acked send not at
// its seq, an entry the client saw changed or gone, a gap, a send stored
// twice, a user entry the echo agent never answered), and reads of one
// session through different nodes must agree entry by entry (no seq
// with two contents). Only unanswered entries are given time (an answer
// may still be on its way); a read is taken again for them until limit.
// limit bounds the whole verification: once it passed, each read gets
// one try, so a cluster that refuses every read fails fast.
func (c *pcluster) verify(clients []*sclient, nodes []int, limit time.Duration) {
	c.t.Helper()
	acks, reads := 0, 0
	deadline := time.Now().Add(limit)
	for _, s := range clients {
		if len(s.refused) > 0 {
			c.t.Errorf("%s (%s): %d resumes refused as if the session were gone; the first: %s", s.name, s.sid, len(s.refused), s.refused[0])
		}
		for i, n := range s.notes {
			c.t.Logf("%s (%s): %s (×%d)", s.name, s.sid, n, s.repeats[i])
			if strings.Contains(n, `"code":"bad_request"`) {
				// The client did nothing wrong: a node with a stale view
				// must say unavailable (retry), never refuse its seq.
				c.t.Errorf("%s (%s): refused as a bad request: %s", s.name, s.sid, n)
			}
		}
		var first []wire.Message
		firstVia := -1
		for _, k := range nodes {
			viol, log, err := s.judge(k, max(time.Until(deadline), 0))
			if err != nil {
				c.t.Errorf("%s (%s): read through %s: %v", s.name, s.sid, c.ids[k], err)
				continue
			}
			reads++
			for i, v := range viol {
				if i == 10 {
					c.t.Errorf("%s (%s) via %s: … %d more", s.name, s.sid, c.ids[k], len(viol)-i)
					break
				}
				c.t.Errorf("%s (%s) read through %s: %s", s.name, s.sid, c.ids[k], v)
			}
			if firstVia < 0 {
				first, firstVia = log, k
				continue
			}
			for i := range min(len(log), len(first)) {
				if a, b := first[i], log[i]; a.Role != b.Role || a.Content != b.Content {
					c.t.Errorf("%s (%s): seq %d is %s %q through %s but %s %q through %s",
						s.name, s.sid, a.Seq, a.Role, a.Content, c.ids[firstVia], b.Role, b.Content, c.ids[k])
					break
				}
			}
			if len(log) != len(first) {
				c.t.Errorf("%s (%s): %d entries through %s, %d through %s", s.name, s.sid, len(first), c.ids[firstVia], len(log), c.ids[k])
			}
		}
		acks += s.acked()
	}
	c.t.Logf("verified %d sessions (%d acked sends) through %d nodes: %d reads", len(clients), acks, len(nodes), reads)
}

// judge reads the session through node k and returns the Verifier's
// violations for that read.
func (s *sclient) judge(k int, limit time.Duration) ([]bench.Violation, []wire.Message, error) {
	deadline := time.Now().Add(limit)
	for {
		log, err := s.readLog(k, time.Until(deadline))
		if err != nil {
			return nil, nil, err
		}
		v := bench.NewVerifier(bench.VerifierConfig{})
		for _, ev := range s.events {
			v.Feed(s.sid, ev)
		}
		v.Feed(s.sid, bench.Event{Kind: bench.EvFinal, Log: log})
		viol, byKind, total := v.Violations()
		if total == byKind[bench.VUnanswered] && total > 0 && time.Now().Before(deadline) {
			time.Sleep(backoff)
			continue
		}
		return viol, log, nil
	}
}
