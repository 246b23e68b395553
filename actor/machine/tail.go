package machine

import "github.com/tether-dev/tether/wal/record"

// tail is the newest durable entries of a session, in memory: what a turn
// reads and what a resume replays, so that neither touches the store in
// the common case. It holds at most maxEntries entries and maxBytes bytes
// (by record.Entry.Size), but always the newest entry. Entries enter only
// once they are durable (the actor's unstable entries wait in front of it,
// as raft's unstable log waits in front of its Storage), and leave from the
// old end.
//
// The entries are a ring: a slice that entries were sliced off the front
// of had to be moved to a new array whenever it ran out of room, a copy of
// the whole tail every few sends of every session under load. The ring
// grows by doubling up to maxEntries, so a session with a short log holds
// a small one.
type tail struct {
	ring       []record.Entry // len(ring) is the capacity; held: n from head on
	sizes      []int          // record.Entry.Size of each slot's entry, computed once
	head, n    int
	bytes      int
	maxEntries int
	maxBytes   int
	// evicted is told of each entry pushed out of the old end.
	evicted func(record.Entry)
}

func newTail(maxEntries, maxBytes int, evicted func(record.Entry)) tail {
	return tail{maxEntries: max(maxEntries, 1), maxBytes: maxBytes, evicted: evicted}
}

// at returns the i-th held entry, oldest first.
func (t *tail) at(i int) *record.Entry { return &t.ring[(t.head+i)%len(t.ring)] }

func (t *tail) len() int { return t.n }

// first and last are the seq range held; first > last when empty.
func (t *tail) first() uint64 {
	if t.n == 0 {
		return 1
	}
	return t.at(0).Seq
}

func (t *tail) last() uint64 {
	if t.n == 0 {
		return 0
	}
	return t.at(t.n - 1).Seq
}

// add appends durable entries, which must follow the newest held one (or,
// when the tail is empty, may start anywhere).
func (t *tail) add(es ...record.Entry) {
	for _, e := range es {
		if t.n > 0 && e.Seq != t.last()+1 {
			// Cannot happen: appends complete in order. Start over rather
			// than hold a gap.
			t.reset()
		}
		if t.n == len(t.ring) {
			if len(t.ring) < t.maxEntries {
				t.grow()
			} else {
				t.drop()
			}
		}
		i := (t.head + t.n) % len(t.ring)
		t.ring[i], t.sizes[i] = e, e.Size()
		t.bytes += t.sizes[i]
		t.n++
	}
	for t.n > 1 && t.bytes > t.maxBytes {
		t.drop()
	}
}

// grow doubles the ring (up to maxEntries), the held entries moved to its
// start.
func (t *tail) grow() {
	size := min(max(2*len(t.ring), 2), t.maxEntries)
	ring, sizes := make([]record.Entry, size), make([]int, size)
	for i := range t.n {
		j := (t.head + i) % len(t.ring)
		ring[i], sizes[i] = t.ring[j], t.sizes[j]
	}
	t.ring, t.sizes, t.head = ring, sizes, 0
}

// drop pushes the oldest entry out, clearing its slot so that its content
// is freed.
func (t *tail) drop() {
	e := t.at(0)
	t.bytes -= t.sizes[t.head]
	if t.evicted != nil {
		t.evicted(*e)
	}
	*e = record.Entry{}
	t.head = (t.head + 1) % len(t.ring)
	t.n--
}

func (t *tail) reset() {
	*t = tail{maxEntries: t.maxEntries, maxBytes: t.maxBytes, evicted: t.evicted}
}

// sized returns a copy of the held entries with lo <= seq < hi (nil when
// there are none) and their record.Entry.Size summed, as computed when
// they came in.
func (t *tail) sized(lo, hi uint64) (out []record.Entry, bytes int) {
	if t.n == 0 || hi <= lo {
		return nil, 0
	}
	f, l := t.first(), t.last()
	lo, hi = max(lo, f), min(hi, l+1)
	if lo >= hi {
		return nil, 0
	}
	out = make([]record.Entry, 0, hi-lo)
	for seq := lo; seq < hi; seq++ {
		i := (t.head + int(seq-f)) % len(t.ring)
		out, bytes = append(out, t.ring[i]), bytes+t.sizes[i]
	}
	return out, bytes
}

// span returns a copy of the held entries with lo <= seq < hi (nil when
// there are none).
func (t *tail) span(lo, hi uint64) []record.Entry {
	out, _ := t.sized(lo, hi)
	return out
}

// all returns a copy of every held entry, oldest first.
func (t *tail) all() []record.Entry { return t.span(t.first(), t.last()+1) }

// get returns the entry with seq, if held.
func (t *tail) get(seq uint64) (record.Entry, bool) {
	if t.n == 0 || seq < t.first() || seq > t.last() {
		return record.Entry{}, false
	}
	return *t.at(int(seq - t.first())), true
}
