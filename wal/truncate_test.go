package wal

import (
	"context"
	"testing"
)

// A copy that diverged from its new owner is truncated together with the
// send ids that pointed at what was cut, found by their own records: the
// log reads no entry's metadata (an entry here has none at all), so the
// send id of a cut entry is forgotten and a client's resend of it is
// stored anew rather than acknowledged at a seq that now holds something
// else.
func TestTruncateForgetsTheSendIDsOfWhatWasCut(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	const sid = "cut"
	at := func(epoch uint64, es ...Entry) []Entry {
		for i := range es {
			es[i].Epoch, es[i].Metadata = epoch, nil
		}
		return es
	}
	hdr := func(last, lastEpoch uint64) Header {
		h := activeHeader(sid)
		h.LastSeq, h.LastEpoch = last, lastEpoch
		return h
	}
	// The old owner (epoch 1) shipped 1..3; sends m1 and m3 became 1 and 3.
	if err := l.Store(ctx, Copy{SessionID: sid, Epoch: 1, Owner: "a", Entries: at(1, entries(1, 3)...),
		Sends: []Send{{ID: "m1", Seq: 1}, {ID: "m3", Seq: 3}}, Header: hdr(3, 1)}); err != nil {
		t.Fatal(err)
	}
	// The new owner (epoch 2) never had 3: its log is 1..2, 2 written by it.
	if err := l.Store(ctx, Copy{SessionID: sid, Epoch: 2, Owner: "b", Prev: 1, PrevEpoch: 1, Entries: at(2, entry(2)),
		Sends: []Send{{ID: "m2", Seq: 2}}, Header: hdr(2, 2)}); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "after the new owner's copy", readAll(t, l, sid), span(1, 2))
	for _, c := range []struct {
		id    string
		seq   uint64
		found bool
	}{{"m1", 1, true}, {"m2", 2, true}, {"m3", 0, false}} {
		seq, ok, err := l.SendSeq(sid, c.id)
		if err != nil || ok != c.found || seq != c.seq {
			t.Errorf("SendSeq(%s) = %d, %v, %v; want %d, %v", c.id, seq, ok, err, c.seq, c.found)
		}
	}
}
