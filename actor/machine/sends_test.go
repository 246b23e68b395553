package machine

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"

	"github.com/tether-dev/tether/wal/record"
)

func TestSessionSend(t *testing.T) {
	s, c := newAttached(t)
	md := map[string]any{"k": "v"}
	now := t0.Add(1500 * time.Millisecond)
	effs := durable(s, now, Send{Conn: c, ID: "m1", Content: "hi", Metadata: md})
	wantTypes(t, "send", effs, Append{}, Deliver{}, Deliver{}, RunStep{})
	ap := effs[0].(Append)
	e := ap.Batch.Entries[0]
	if len(ap.Batch.Entries) != 1 || e.Seq != 1 || e.Role != engine.RoleUser || e.Content != "hi" || e.Time != unixSeconds(now) ||
		!reflect.DeepEqual(e.Metadata, map[string]any{"k": "v", "id": "m1"}) {
		t.Fatalf("entries = %+v", ap.Batch.Entries)
	}
	if _, ok := md["id"]; ok {
		t.Fatal("send wrote into the caller's metadata map")
	}
	if !reflect.DeepEqual(ap.Batch.Sends, []record.Send{{ID: "m1", Seq: 1}}) || ap.Batch.Header.LastSeq != 1 {
		t.Fatalf("batch sends %v header %+v", ap.Batch.Sends, ap.Batch.Header)
	}
	if st, err := decodeState(ap.Batch.Header.State); err != nil || !slices.Equal(st.Turns, []uint64{1}) {
		t.Fatalf("appended state %+v (%v)", st, err)
	}
	if ap.Batch.Context != nil {
		t.Fatal("a send rewrote the context, which did not change")
	}
	if d := effs[1].(Deliver); d.Conn != c || *d.Out.(*AckOut) != (AckOut{ID: "m1", Seq: 1}) {
		t.Fatalf("second effect = %+v, want the ack", d)
	}
	if d := effs[2].(Deliver); !reflect.DeepEqual(d.Out, &EntryOut{Entry: e}) {
		t.Fatalf("third effect = %+v, want the entry", d)
	}
	if st := effs[3].(RunStep); st.UserSeq != 1 {
		t.Fatalf("step = %+v", st)
	}
	// A second send while the turn runs is queued, with no second step.
	effs = durable(s, now, Send{Conn: c, ID: "m2", Content: "more"})
	wantTypes(t, "busy send", effs, Append{}, Deliver{}, Deliver{})
	if !slices.Equal(s.st.Turns, []uint64{1, 2}) {
		t.Fatalf("turns = %v", s.st.Turns)
	}
}

// A repeated send id is answered with its first ack; nothing is stored.
func TestSessionRepeatSendFromMemory(t *testing.T) {
	s, c := exchanged(t)
	before, appends := s.Header(), s.nextID
	effs := s.Step(t0, Send{Conn: c, ID: "m1", Content: "hi again"})
	wantTypes(t, "repeat", effs, Deliver{})
	if *effs[0].(Deliver).Out.(*AckOut) != (AckOut{ID: "m1", Seq: 1}) {
		t.Fatalf("repeat ack = %+v", effs[0])
	}
	if !reflect.DeepEqual(s.Header(), before) || s.nextID != appends {
		t.Fatal("a repeated send changed the session")
	}
}

// A duplicate of a send still in flight is acked only once that send is
// durable, after the first ack.
func TestSessionRepeatSendInFlight(t *testing.T) {
	s, c := newAttached(t)
	ap := one[Append](t, s.Step(t0, Send{Conn: c, ID: "m1", Content: "hi"}))
	if effs := s.Step(t0, Send{Conn: c, ID: "m1", Content: "hi"}); len(effs) != 0 {
		t.Fatalf("duplicate of an in-flight send: %v (its ack must wait)", effTypes(effs))
	}
	got := outs(s.Step(t0, Appended{ID: ap.ID}))
	if len(got) != 3 || *got[0].(*AckOut) != (AckOut{ID: "m1", Seq: 1}) || got[1].(*EntryOut).Entry.Seq != 1 ||
		*got[2].(*AckOut) != (AckOut{ID: "m1", Seq: 1}) {
		t.Fatalf("released %s", dumpOuts(got))
	}
	if s.hdr.LastSeq != 1 || s.nextID != ap.ID {
		t.Fatalf("the duplicate was stored: last %d appends %d", s.hdr.LastSeq, s.nextID)
	}
}

// An id from an earlier activation is in the filters: the machine asks the
// store (effLookupSend), and its answer decides.
func TestSessionRepeatSendFromFilter(t *testing.T) {
	loaded := func() (*Machine, *tconn) {
		h := baseHeader()
		h.LastSeq = 10
		s := machine(h, state{}, record.Entry{Seq: 9, Role: engine.RoleUser, Metadata: map[string]any{"id": "m9"}}, record.Entry{Seq: 10, Role: engine.RoleAgent})
		s.sends.addOlder("m1") // as load does for ids older than the tail
		c := &tconn{"c"}
		s.Step(t0, Attach{Conn: c, UserID: "alice", LastSeq: 10})
		return s, c
	}
	t.Run("found", func(t *testing.T) {
		s, c := loaded()
		send := Send{Conn: c, ID: "m1", Content: "again"}
		effs := s.Step(t0, send)
		wantTypes(t, "old id", effs, LookupSend{})
		if !reflect.DeepEqual(effs[0].(LookupSend).Send, send) {
			t.Fatalf("lookup = %+v", effs[0])
		}
		before, appends := s.Header(), s.nextID
		effs = s.Step(t0, SendChecked{Send: send, Seq: 1, Found: true})
		wantTypes(t, "found", effs, Deliver{})
		if *effs[0].(Deliver).Out.(*AckOut) != (AckOut{ID: "m1", Seq: 1}) || s.nextID != appends || !reflect.DeepEqual(s.Header(), before) {
			t.Fatalf("found: %+v, header %+v", effs, s.Header())
		}
	})
	t.Run("not found", func(t *testing.T) {
		s, c := loaded()
		send := Send{Conn: c, ID: "m1", Content: "new after all"}
		one[LookupSend](t, s.Step(t0, send))
		effs := s.Step(t0, SendChecked{Send: send, Found: false})
		ap := one[Append](t, effs)
		if ap.Batch.Entries[0].Seq != 11 || ap.Batch.Entries[0].Content != "new after all" {
			t.Fatalf("a filter false positive was not stored as new: %+v", ap.Batch.Entries)
		}
	})
	t.Run("recent ids and unknown ids need no lookup", func(t *testing.T) {
		s, c := loaded()
		wantTypes(t, "recent", s.Step(t0, Send{Conn: c, ID: "m9"}), Deliver{})
		wantTypes(t, "unknown", s.Step(t0, Send{Conn: c, ID: "fresh"}), Append{})
	})
	t.Run("evicted from the tail", func(t *testing.T) {
		s, c := newAttached(t)
		s.tail.maxEntries = 2
		for i := 1; i <= 3; i++ {
			durable(s, t0, Send{Conn: c, ID: fmt.Sprint("m", i), Content: "x"})
			durable(s, t0, StepDone{Step: s.step, UserSeq: uint64(2*i - 1), Action: engine.Action{Reply: "r"}})
		}
		if _, ok := s.sends.seen("m1"); ok || !s.sends.mayBeOlder("m1") {
			t.Fatal("an id whose entry left the tail must move to the filters")
		}
		wantTypes(t, "evicted id", s.Step(t0, Send{Conn: c, ID: "m1"}), LookupSend{})
	})
}

func TestSessionMaxTurns(t *testing.T) {
	s, c := newAttached(t)
	for i := 1; i <= 4; i++ { // the engine answers none of them
		durable(s, t0, Send{Conn: c, ID: fmt.Sprint("m", i), Content: "x"})
	}
	before, appends := s.Header(), s.nextID
	effs := s.Step(t0, Send{Conn: c, ID: "m5", Content: "one too many"})
	wantTypes(t, "over the limit", effs, Deliver{})
	e, ok := effs[0].(Deliver).Out.(*ErrorOut)
	if !ok || e.Code != CodeRateLimited || e.ID != "m5" || !strings.Contains(e.Message, "busy") {
		t.Fatalf("refusal = %+v", effs[0])
	}
	if s.nextID != appends || !reflect.DeepEqual(s.Header(), before) || len(s.st.Turns) != 4 {
		t.Fatal("a refused send changed the session")
	}
	// A repeat of an accepted one is still acked; once a turn is answered
	// there is room again.
	wantTypes(t, "repeat at the limit", s.Step(t0, Send{Conn: c, ID: "m1"}), Deliver{})
	durable(s, t0, StepDone{Step: s.step, UserSeq: 1, Action: engine.Action{Reply: "r"}})
	if ap := one[Append](t, s.Step(t0, Send{Conn: c, ID: "m5", Content: "now"})); ap.Batch.Entries[0].Seq != 6 {
		t.Fatalf("send after room was made: %+v", ap.Batch.Entries)
	}
}

func TestSendIndexFilters(t *testing.T) {
	var x sendIndex
	x.retireThrough(5) // nothing to move
	if len(x.filters) != 0 {
		t.Fatal("retiring with no ids made a filter")
	}
	x.add("r", 7)
	x.add("s", 9)
	x.retireThrough(8)
	if _, ok := x.seen("r"); ok || !x.mayBeOlder("r") {
		t.Fatal("retireThrough must move the id from memory to the filters")
	}
	if seq, ok := x.seen("s"); !ok || seq != 9 || len(x.order) != 1 {
		t.Fatalf("an id after the seq retired: seen %d %v, %d in order", seq, ok, len(x.order))
	}
	for i := range 2000 {
		x.addOlder(fmt.Sprint("old-", i))
	}
	for i := range 2000 {
		if !x.mayBeOlder(fmt.Sprint("old-", i)) {
			t.Fatalf("old-%d lost: a filter must have no false negatives", i)
		}
	}
	// The filters double: 256, 512, 1024, 2048 ids.
	if !slices.Equal(x.caps, []uint{256, 512, 1024, 2048}) {
		t.Fatalf("filter capacities %v", x.caps)
	}
	fp := 0
	for i := range 10000 {
		if x.mayBeOlder(fmt.Sprint("new-", i)) {
			fp++
		}
	}
	// Four filters at 0.1% each: well under 1% in all.
	if fp > 100 {
		t.Fatalf("%d false positives in 10000", fp)
	}
}

func TestTailBounds(t *testing.T) {
	entry := func(seq uint64, n int) record.Entry {
		return record.Entry{Seq: seq, Role: engine.RoleUser, Content: strings.Repeat("x", n), Metadata: map[string]any{"id": fmt.Sprint("m", seq)}}
	}
	var evicted []uint64
	tl := newTail(3, 1<<20, func(e record.Entry) { evicted = append(evicted, e.Seq) })
	if tl.first() != 1 || tl.last() != 0 || tl.span(1, 5) != nil {
		t.Fatal("an empty tail holds something")
	}
	for s := uint64(1); s <= 5; s++ {
		tl.add(entry(s, 10))
	}
	if !slices.Equal(seqsOf(tl.all()), []uint64{3, 4, 5}) || !slices.Equal(evicted, []uint64{1, 2}) {
		t.Fatalf("tail %v evicted %v", seqsOf(tl.all()), evicted)
	}
	if got := seqsOf(tl.span(1, 5)); !slices.Equal(got, []uint64{3, 4}) {
		t.Fatalf("span(1,5) = %v", got)
	}
	if e, ok := tl.get(4); !ok || e.Seq != 4 {
		t.Fatal("get(4)")
	}
	if _, ok := tl.get(2); ok {
		t.Fatal("get of an evicted entry")
	}

	// The byte cap: 32 KiB entries under a 100 KiB cap. The tail never
	// holds more than the cap, except a single entry larger than it.
	const kib = 1 << 10
	tb := newTail(1000, 100*kib, nil)
	for s := uint64(1); s <= 20; s++ {
		tb.add(entry(s, 32*kib))
		sum := 0
		for _, e := range tb.all() {
			sum += e.Size()
		}
		if sum != tb.bytes || tb.bytes > 100*kib || tb.last() != s {
			t.Fatalf("after %d: %d entries, %d bytes (counted %d), last %d", s, tb.len(), tb.bytes, sum, tb.last())
		}
	}
	if tb.len() != 3 {
		t.Fatalf("%d entries of 32 KiB under 100 KiB", tb.len())
	}
	tb.add(entry(21, 200*kib))
	if tb.len() != 1 || tb.last() != 21 {
		t.Fatalf("an entry over the cap must stay alone: %v", seqsOf(tb.all()))
	}
	// A gap (cannot happen) starts the tail over rather than hold it.
	tb.add(entry(30, 10))
	if !slices.Equal(seqsOf(tb.all()), []uint64{30}) {
		t.Fatalf("after a gap: %v", seqsOf(tb.all()))
	}
}

// The ring holds what a plain slice trimmed from the front would, whatever
// the caps and however far it has wrapped.
func TestTailRingMatchesSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		maxEntries, maxBytes := 1+rng.IntN(12), 200+rng.IntN(2000)
		var evicted, model []record.Entry
		tl := newTail(maxEntries, maxBytes, func(e record.Entry) { evicted = append(evicted, e) })
		var out []record.Entry // everything that left, model side
		seq := uint64(0)
		for range 60 {
			batch := make([]record.Entry, 1+rng.IntN(3))
			for i := range batch {
				seq++
				batch[i] = record.Entry{Seq: seq, Role: engine.RoleAgent, Content: strings.Repeat("y", rng.IntN(300))}
			}
			tl.add(batch...)
			model = append(model, batch...)
			for len(model) > 1 && (len(model) > maxEntries || sizeOf(model) > maxBytes) {
				out, model = append(out, model[0]), model[1:]
			}
			if !slices.Equal(seqsOf(tl.all()), seqsOf(model)) || tl.bytes != sizeOf(model) {
				t.Fatalf("round %d: ring %v (%d bytes), want %v (%d bytes)",
					round, seqsOf(tl.all()), tl.bytes, seqsOf(model), sizeOf(model))
			}
			if !slices.Equal(seqsOf(evicted), seqsOf(out)) {
				t.Fatalf("round %d: evicted %v, want %v", round, seqsOf(evicted), seqsOf(out))
			}
			lo, hi := uint64(rng.IntN(int(seq)+2)), uint64(rng.IntN(int(seq)+2))
			var want []uint64
			for _, e := range model {
				if e.Seq >= lo && e.Seq < hi {
					want = append(want, e.Seq)
				}
			}
			span, n := tl.sized(lo, hi)
			if got := seqsOf(span); !slices.Equal(got, want) {
				t.Fatalf("round %d: span(%d, %d) = %v, want %v", round, lo, hi, got, want)
			}
			if n != sizeOf(span) {
				t.Fatalf("round %d: sized(%d, %d) says %d bytes, the span's entries hold %d", round, lo, hi, n, sizeOf(span))
			}
			if e, ok := tl.get(model[0].Seq); !ok || e.Seq != model[0].Seq {
				t.Fatalf("round %d: get of the oldest held entry %d", round, model[0].Seq)
			}
		}
	}
}

func sizeOf(es []record.Entry) (n int) {
	for _, e := range es {
		n += e.Size()
	}
	return n
}
