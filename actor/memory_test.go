package actor

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// The session lives in its actor: steady-state turns read nothing from
// the store, activation reads the tail with one range read, and what is
// older than the tail is read from the log only when asked for.

func msg(i int) string { return fmt.Sprint("message ", i) }

func TestSteadyStateReadsNothing(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	e.j.resetCounts()
	// 40 exchanges: more entries than the tail holds (64), so eviction
	// and the filters are part of the run.
	chats(t, h, c, 40, msg)
	if err := h.Send(t.Context(), "m39", "again", nil); err != nil {
		t.Fatal(err)
	}
	expect[*machine.AckOut](t, c)
	if err := h.History(t.Context(), 0, 10); err != nil {
		t.Fatal(err)
	}
	if b := expect[*machine.BatchOut](t, c); !reflect.DeepEqual(seqsOf(b.Messages), span(71, 80)) {
		t.Fatalf("history = %v", seqsOf(b.Messages))
	}
	if e.j.reads.Load()+e.j.sendSeqs.Load()+e.j.scans.Load()+e.j.loads.Load()+e.j.headers.Load() != 0 {
		t.Fatalf("an active session read the store: %s, Header %d", e.j.storeReads(), e.j.headers.Load())
	}
	// Echo is Instant: each message and its answer are one append.
	if n := e.j.appends.Load(); n != 40 {
		t.Fatalf("%d appends for 40 exchanges", n)
	}
}

func TestActivationReads(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chats int
		scans int64
	}{{"shorter than the tail", 3, 0}, {"longer than the tail", 40, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			c := newRecConn("c")
			h := e.create("s", "alice", c)
			chats(t, h, c, tc.chats, msg)
			h.Detach()
			e.passivate("s")
			e.j.resetCounts()
			last := uint64(2 * tc.chats)
			c2 := newRecConn("c2")
			h2, _, b := e.resume("s", "alice", last, c2)
			if len(b.Messages) != 0 {
				t.Fatalf("replay %v", seqsOf(b.Messages))
			}
			if e.j.reads.Load() != 1 || e.j.scans.Load() != tc.scans || e.j.sendSeqs.Load() != 0 || e.j.loads.Load() != 0 {
				t.Fatalf("activation: %s, want one Read and %d ScanSends", e.j.storeReads(), tc.scans)
			}
			// The first turn may read the session's first entry once (for
			// the engine's summary of what is older than its history);
			// after that, turns read nothing.
			e.j.resetCounts()
			chat(t, h2, c2, "after-0", msg(0))
			if e.j.reads.Load() > 1 || e.j.sendSeqs.Load()+e.j.scans.Load() != 0 {
				t.Fatalf("the first turn after activation: %s", e.j.storeReads())
			}
			e.j.resetCounts()
			for i := 1; i <= 5; i++ {
				chat(t, h2, c2, fmt.Sprint("after-", i), msg(i))
			}
			if e.j.reads.Load()+e.j.sendSeqs.Load()+e.j.scans.Load() != 0 {
				t.Fatalf("turns after activation read the store: %s", e.j.storeReads())
			}
		})
	}
}

func TestHistoryBeyondTailReadsStore(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TailEntries = 8 })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	chats(t, h, c, 10, msg) // entries 1..20; the tail holds 13..20
	page := func(before uint64, limit int) []wal.Entry {
		t.Helper()
		if err := h.History(t.Context(), before, limit); err != nil {
			t.Fatal(err)
		}
		return expect[*machine.BatchOut](t, c).Messages
	}
	e.j.resetCounts()
	if got := page(0, 5); !reflect.DeepEqual(seqsOf(got), span(16, 20)) || e.j.reads.Load() != 0 {
		t.Fatalf("page in the tail: %v, %s", seqsOf(got), e.j.storeReads())
	}
	if got := page(16, 3); !reflect.DeepEqual(seqsOf(got), span(13, 15)) || e.j.reads.Load() != 0 {
		t.Fatalf("page in the tail: %v, %s", seqsOf(got), e.j.storeReads())
	}
	got := page(15, 6) // 9..14: four from the log, two from memory
	if !reflect.DeepEqual(seqsOf(got), span(9, 14)) || e.j.reads.Load() != 1 {
		t.Fatalf("page across the tail's start: %v, %s", seqsOf(got), e.j.storeReads())
	}
	if log := e.entriesOf("s"); !sameEntries(got, log[8:14]) {
		t.Fatalf("page %+v differs from the log", got)
	}
}

// A send id from a previous activation still gets its first ack and
// stores nothing: after a passivation and after a restart, for an id in
// the tail and for one older than the tail (found through the filters and
// one store read).
func TestSendIDFromPreviousActivation(t *testing.T) {
	for _, restart := range []bool{false, true} {
		for _, long := range []bool{false, true} {
			name := fmt.Sprintf("restart=%v/older than the tail=%v", restart, long)
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, func(c *Config) { c.TailEntries = 6 })
				c := newRecConn("c")
				h := e.create("s", "alice", c)
				n := 2
				if long {
					n = 10
				}
				chats(t, h, c, n, msg)
				last := uint64(2 * n)
				h.Detach()
				if restart {
					e.restart()
				} else {
					e.passivate("s")
				}
				c2 := newRecConn("c2")
				h2, _, _ := e.resume("s", "alice", last, c2)
				e.j.resetCounts()
				for i, id := range []string{"m0", fmt.Sprint("m", n-1)} {
					if err := h2.Send(t.Context(), id, "resent", nil); err != nil {
						t.Fatal(err)
					}
					want := machine.AckOut{ID: id, Seq: uint64(1 + 2*i*(n-1))}
					if ack := expect[*machine.AckOut](t, c2); *ack != want {
						t.Fatalf("ack = %+v, want %+v", ack, want)
					}
				}
				// m0 is older than the tail only in the long session.
				if want := map[bool]int64{false: 0, true: 1}[long]; e.j.sendSeqs.Load() != want {
					t.Fatalf("store lookups: %s, want %d SendSeq", e.j.storeReads(), want)
				}
				// Nothing was stored: the next new send follows the old log.
				if seq := chat(t, h2, c2, "new", "fresh"); seq != last+1 {
					t.Fatalf("new send stored as %d, want %d", seq, last+1)
				}
				if rest := c2.unread(); len(rest) != 0 {
					t.Fatalf("frames after the repeats: %s", dumpOuts(rest))
				}
			})
		}
	}
}

// A resume whose missed range starts before the tail gets all of it,
// without a gap, part from the log and part from memory.
func TestResumeBeforeTailGapFree(t *testing.T) {
	for _, passive := range []bool{false, true} {
		t.Run(fmt.Sprintf("passive=%v", passive), func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.TailEntries = 4 })
			c := newRecConn("c")
			h := e.create("s", "alice", c)
			chats(t, h, c, 10, msg) // entries 1..20; the tail holds 17..20
			h.Detach()
			if passive {
				e.passivate("s")
			} else {
				e.settle("s")
			}
			e.j.resetCounts()
			_, so, b := e.resume("s", "alice", 3, newRecConn("c2"))
			if so.LastSeq != 20 || !reflect.DeepEqual(seqsOf(b.Messages), span(4, 20)) || b.Omitted != 0 || b.Summary != "" {
				t.Fatalf("replay %v omitted %d", seqsOf(b.Messages), b.Omitted)
			}
			if log := e.entriesOf("s"); !sameEntries(b.Messages, log[3:]) {
				t.Fatalf("replay differs from the log:\n%+v\n%+v", b.Messages, log[3:])
			}
			// One read for what is older than the tail (plus the tail's own
			// on activation).
			if want := map[bool]int64{false: 1, true: 2}[passive]; e.j.reads.Load() != want {
				t.Fatalf("reads: %s, want %d", e.j.storeReads(), want)
			}
		})
	}
}

// More missed than ReplayLimit: the newest come in the batch, the rest is
// counted and summarized, and paging history fills it in without a gap.
func TestResumeBeyondReplayLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TailEntries, c.ReplayLimit = 4, 5 })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	chats(t, h, c, 10, msg)
	h.Detach()
	e.passivate("s")
	c2 := newRecConn("c2")
	h2, _, b := e.resume("s", "alice", 3, c2)
	if !reflect.DeepEqual(seqsOf(b.Messages), span(16, 20)) || b.Omitted != 12 {
		t.Fatalf("replay %v omitted %d, want 16..20 and 12", seqsOf(b.Messages), b.Omitted)
	}
	// The tail (17..20) came from memory; 16, read from the log, went on
	// as the log stores it.
	if n := c2.stored.Load(); n != 1 {
		t.Fatalf("%d entries sent as stored, want 1", n)
	}
	for _, want := range []string{"12 earlier entries (seq 4–15)", "before_seq=16", `agent: "Agent reply: message 1"`} {
		if !strings.Contains(b.Summary, want) {
			t.Fatalf("summary %q lacks %q", b.Summary, want)
		}
	}
	if err := h2.History(t.Context(), 16, 50); err != nil {
		t.Fatal(err)
	}
	page := expect[*machine.BatchOut](t, c2)
	if !reflect.DeepEqual(seqsOf(page.Messages), span(1, 15)) || page.Omitted != 0 {
		t.Fatalf("page %v omitted %d", seqsOf(page.Messages), page.Omitted)
	}
	if log := e.entriesOf("s"); !sameEntries(append(page.Messages, b.Messages...), log) {
		t.Fatal("page + replay differ from the log")
	}
}

// The byte caps hold with 32 KiB entries (the tail in memory: machine
// TestTailBounds): a history
// page and a resume's replay (with omitted counting the rest).
func TestByteCapsWith32KiBEntries(t *testing.T) {
	const kib = 1 << 10
	e := newEnv(t, func(c *Config) { c.TailBytes, c.MaxBatchBytes = 100*kib, 100*kib })
	c := newRecConn("c")
	h := e.create("s", "alice", c)
	big := func(i int) string { return fmt.Sprint(i, strings.Repeat("x", 32*kib)) }
	for i := range 6 {
		chat(t, h, c, fmt.Sprint("m", i), big(i))
	}
	batchBytes := func(b *machine.BatchOut) (n int) {
		for _, en := range b.Messages {
			n += en.Size()
		}
		return n
	}
	if err := h.History(t.Context(), 0, 50); err != nil {
		t.Fatal(err)
	}
	page := expect[*machine.BatchOut](t, c)
	if !reflect.DeepEqual(seqsOf(page.Messages), span(10, 12)) || page.Omitted != 9 || batchBytes(page) > 100*kib {
		t.Fatalf("page %v omitted %d, %d bytes", seqsOf(page.Messages), page.Omitted, batchBytes(page))
	}
	h.Detach()
	e.passivate("s")
	_, _, b := e.resume("s", "alice", 0, newRecConn("c2"))
	if !reflect.DeepEqual(seqsOf(b.Messages), span(10, 12)) || b.Omitted != 9 || batchBytes(b) > 100*kib ||
		!strings.Contains(b.Summary, "before_seq=10") {
		t.Fatalf("replay %v omitted %d, %d bytes, summary %q", seqsOf(b.Messages), b.Omitted, batchBytes(b), b.Summary)
	}
	if b.Messages[2].Content != "Agent reply: "+big(5) {
		t.Fatal("the replay's last entry is not the last reply")
	}
}
