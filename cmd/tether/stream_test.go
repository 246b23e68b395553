package main

import (
	"strings"
	"testing"
	"time"
)

// TestCrashMidStream: SIGKILL while the demo agent streams its reply (a
// word every 150ms). After the restart the turn runs again from the log
// (the search result is reused, not searched again), the client that
// resumes gets the complete reply, and the parts it held before the crash
// are superseded: the re-run's deltas start over with from:0 and the
// final message is the whole reply.
func TestCrashMidStream(t *testing.T) {
	t.Parallel()
	tok := token(t, "alice")
	flags := []string{"--agent", "demo", "--demo-search-delay", "100ms", "--demo-stream-delay", "150ms", "--stream-flush", "0"}
	p := startServe(t, t.TempDir(), flags...)
	c := dial(t, p.wsURL())
	sid := c.hello(tok, "", 0).SessionID
	c.mustWrite(sendFrame("q-1", "compare two laptops"))
	var held strings.Builder
	var replySeq uint64
	c.until(15*time.Second, "the reply streaming", failOnError(t), func(f frame) bool {
		if f.Type == "delta" {
			replySeq = f.Seq
			held.WriteString(f.Text)
			return held.Len() > 0 && f.Part >= 1
		}
		return false
	})
	p.kill9()
	p2 := p.restart(flags...)
	c2 := dial(t, p2.wsURL())
	if s := c2.hello(tok, sid, replySeq-1); !s.Resumed {
		t.Fatalf("resume after the crash: %s", s.Raw)
	}
	var again strings.Builder
	sawFrom0 := false
	final := c2.until(20*time.Second, "the complete reply", failOnError(t), func(f frame) bool {
		if f.Type == "delta" && f.Seq == replySeq {
			if f.From != nil && *f.From == 0 {
				sawFrom0 = true
				again.Reset()
			}
			again.WriteString(f.Text)
		}
		return f.Type == "message" && f.Seq == replySeq
	})
	if final.Role != "agent" || !strings.HasPrefix(final.Content, held.String()) || !strings.Contains(final.Content, "Found 3 results") {
		t.Fatalf("final message %q, parts held before the crash %q", final.Content, held.String())
	}
	if again.Len() > 0 && (!sawFrom0 || !strings.HasPrefix(final.Content, again.String())) {
		t.Fatalf("the re-run's deltas %q (from 0: %v) are not a prefix of %q", again.String(), sawFrom0, final.Content)
	}
	if got := p2.mustMetric("tether_tool_runs_total"); got != 0 {
		t.Fatalf("the search ran again after the restart (%v runs)", got)
	}
}
