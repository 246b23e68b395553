package actor

import "github.com/tether-dev/tether/wal"

// tail is the newest durable entries of a session, in memory: what a turn
// reads and what a resume replays, so that neither touches the store in
// the common case. It holds at most maxEntries entries and maxBytes bytes
// (by wal.Entry.Size), but always the newest entry. Entries enter only
// once they are durable (the actor's unstable entries wait in front of it,
// as raft's unstable log waits in front of its Storage), and leave from the
// old end.
type tail struct {
	entries    []wal.Entry // oldest first, seqs consecutive
	sizes      []int       // wal.Entry.Size of each, computed once
	bytes      int
	maxEntries int
	maxBytes   int
	// evicted is told of each entry pushed out of the old end.
	evicted func(wal.Entry)
}

func newTail(maxEntries, maxBytes int, evicted func(wal.Entry)) tail {
	return tail{maxEntries: max(maxEntries, 1), maxBytes: maxBytes, evicted: evicted}
}

// first and last are the seq range held; first > last when empty.
func (t *tail) first() uint64 {
	if len(t.entries) == 0 {
		return 1
	}
	return t.entries[0].Seq
}

func (t *tail) last() uint64 {
	if len(t.entries) == 0 {
		return 0
	}
	return t.entries[len(t.entries)-1].Seq
}

// add appends durable entries, which must follow the newest held one (or,
// when the tail is empty, may start anywhere).
func (t *tail) add(es ...wal.Entry) {
	for _, e := range es {
		if n := len(t.entries); n > 0 && e.Seq != t.entries[n-1].Seq+1 {
			// Cannot happen: appends complete in order. Start over rather
			// than hold a gap.
			t.reset()
		}
		n := e.Size()
		t.entries = append(t.entries, e)
		t.sizes = append(t.sizes, n)
		t.bytes += n
	}
	t.trim()
}

func (t *tail) trim() {
	drop := 0
	for len(t.entries)-drop > 1 && (len(t.entries)-drop > t.maxEntries || t.bytes > t.maxBytes) {
		t.bytes -= t.sizes[drop]
		if t.evicted != nil {
			t.evicted(t.entries[drop])
		}
		drop++
	}
	if drop == 0 {
		return
	}
	// Clear the dropped entries, so their content is freed, and slice them
	// off: the next append that runs out of room moves the held entries to
	// a new array. Copying them down here instead cost a copy of the whole
	// tail per append once it was full (3% of the server's CPU under load).
	clear(t.entries[:drop])
	t.entries = t.entries[drop:]
	t.sizes = t.sizes[drop:]
	if n := len(t.entries); cap(t.entries) > 4*max(n, 8) {
		t.entries = append([]wal.Entry(nil), t.entries...)
		t.sizes = append([]int(nil), t.sizes...)
	}
}

func (t *tail) reset() {
	t.entries, t.sizes, t.bytes = nil, nil, 0
}

// span returns the held entries with lo <= seq < hi (a view: callers must
// not keep it across an add).
func (t *tail) span(lo, hi uint64) []wal.Entry {
	if len(t.entries) == 0 || hi <= lo {
		return nil
	}
	f, l := t.first(), t.last()
	lo, hi = max(lo, f), min(hi, l+1)
	if lo >= hi {
		return nil
	}
	return t.entries[lo-f : hi-f]
}

// get returns the entry with seq, if held.
func (t *tail) get(seq uint64) (wal.Entry, bool) {
	if s := t.span(seq, seq+1); len(s) == 1 {
		return s[0], true
	}
	return wal.Entry{}, false
}
