package machine

import (
	"github.com/bits-and-blooms/bloom/v3"
)

// sendIndex answers "was this send id seen before in the session?" without
// a store read in the common case. Ids of the entries in memory (the tail,
// and sends not yet durable) are in recent, with their seq. Every older id
// is in a bloom filter loaded when the session is activated: a miss there
// is certain and costs nothing, a hit (rarely a false one) is confirmed by
// one store read. The filters grow by doubling, so a session of any length
// pays a few bits per id.
type sendIndex struct {
	recent map[string]uint64
	// order has recent's ids oldest first: the ids of entries leaving the
	// tail are found here, not by reading the entries' metadata.
	order   []sentID
	filters []*bloom.BloomFilter
	counts  []uint // ids in each filter
	caps    []uint // ids each filter was sized for
}

// sentID is a send id and the seq of the entry it became.
type sentID struct {
	seq uint64
	id  string
}

// falsePositives is each bloom filter's target false positive rate. A
// session has several filters (one per doubling), and every false positive
// costs a store read on a send: 0.1% keeps that rare for 14 bits an id.
const falsePositives = 0.001

// firstFilter is the capacity of the first filter; each next one doubles.
const firstFilter = 256

// seen returns the seq id became, when it is known without the store.
func (x *sendIndex) seen(id string) (uint64, bool) {
	seq, ok := x.recent[id]
	return seq, ok
}

// mayBeOlder reports whether id may be among the older ids (a store read
// tells for sure).
func (x *sendIndex) mayBeOlder(id string) bool {
	// The id is hashed once for every filter with the same number of
	// hash functions (all of them: they share the false positive rate).
	var locs []uint64
	for _, f := range x.filters {
		if uint(len(locs)) != f.K() {
			locs = bloom.Locations([]byte(id), f.K())
		}
		if f.TestLocations(locs) {
			return true
		}
	}
	return false
}

// add records a send id seen in memory.
func (x *sendIndex) add(id string, seq uint64) {
	if x.recent == nil {
		x.recent = make(map[string]uint64, 4)
	}
	x.recent[id] = seq
	x.order = append(x.order, sentID{seq: seq, id: id})
}

// retireThrough moves the ids of the entries up to seq, which left the
// tail, out of memory into the filters.
func (x *sendIndex) retireThrough(seq uint64) {
	n := 0
	for ; n < len(x.order) && x.order[n].seq <= seq; n++ {
		delete(x.recent, x.order[n].id)
		x.addOlder(x.order[n].id)
	}
	if n > 0 {
		clear(x.order[:n])
		x.order = x.order[n:]
	}
}

// addOlder puts id in the newest filter, starting a twice larger one when
// that is full.
func (x *sendIndex) addOlder(id string) {
	n := len(x.filters)
	if n == 0 || x.counts[n-1] >= x.caps[n-1] {
		capacity := uint(firstFilter) << min(n, 20)
		x.filters = append(x.filters, bloom.NewWithEstimates(capacity, falsePositives))
		x.counts = append(x.counts, 0)
		x.caps = append(x.caps, capacity)
		n++
	}
	x.filters[n-1].AddString(id)
	x.counts[n-1]++
}
