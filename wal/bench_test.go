package wal

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// benchContent makes an encoded entry about 256 bytes long (msgpack adds
// ~36 bytes of field names, seq, role and time around the content).
var benchContent = strings.Repeat("x", 220)

func benchEntry(seq uint64) Entry {
	return Entry{Seq: seq, Role: "user", Content: benchContent, Time: float64(t0.Unix()) + float64(seq)}
}

// prefill appends entries 1..n to m's session in batches of 500 and returns
// the metadata as of the last one.
func prefill(tb testing.TB, l *Log, m Meta, epoch uint64, n int) Meta {
	tb.Helper()
	const chunk = 500
	es := make([]Entry, 0, chunk)
	for s := uint64(1); s <= uint64(n); {
		es = es[:0]
		for ; s <= uint64(n) && len(es) < chunk; s++ {
			es = append(es, benchEntry(s))
		}
		m.LastSeq = es[len(es)-1].Seq
		mustAppend(tb, l, Batch{SessionID: m.SessionID, Epoch: epoch, Entries: es, Meta: m})
	}
	return m
}

// appendOne durably appends the entry after m.LastSeq and advances m.
func appendOne(l *Log, m *Meta, epoch uint64) error {
	seq := m.LastSeq + 1
	m.LastSeq = seq
	return l.Append(context.Background(), Batch{
		SessionID: m.SessionID,
		Epoch:     epoch,
		Entries:   []Entry{benchEntry(seq)},
		Meta:      *m,
	})
}

// BenchmarkAppendDurable: one op is one durable Append of one ~256-byte
// entry plus the session's metadata. With sessions=64, 64 goroutines each
// own one session and share b.N between them, so concurrent appends can
// share fsyncs (group commit).
func BenchmarkAppendDurable(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) { benchAppendDurable(b, n) })
	}
}

func benchAppendDurable(b *testing.B, sessions int) {
	l := newTestLog(b)
	metas := make([]Meta, sessions)
	for i := range metas {
		metas[i] = mustCreate(b, l, activeMeta(fmt.Sprintf("bench-%02d", i)))
	}
	start := make(chan struct{})
	errs := make(chan error, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		n := b.N / sessions
		if i < b.N%sessions {
			n++
		}
		wg.Add(1)
		go func(m Meta, n int) {
			defer wg.Done()
			<-start
			for range n {
				if err := appendOne(l, &m, 1); err != nil {
					errs <- err
					return
				}
			}
		}(metas[i], n)
	}
	before := l.Stats()
	b.ResetTimer()
	close(start)
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	after := l.Stats()
	syncs := float64(after.Syncs - before.Syncs)
	entries := float64(after.Entries - before.Entries)
	if entries != float64(b.N) {
		b.Fatalf("%v entries appended, want %d", entries, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	b.ReportMetric(syncs/float64(b.N), "fsyncs/op")
	b.ReportMetric(entries/syncs, "entries/fsync")
}

// BenchmarkAppendAtSize: single-entry durable appends to a session that
// already holds 5 or 5000 entries. The log is appended, never rewritten,
// so ns/op should not depend on the size.
func BenchmarkAppendAtSize(b *testing.B) {
	for _, n := range []int{5, 5000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			l := newTestLog(b)
			m := mustCreate(b, l, activeMeta("big"))
			m = prefill(b, l, m, 1, n)
			before := l.Stats()
			b.ResetTimer()
			for range b.N {
				if err := appendOne(l, &m, 1); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(l.Stats().Syncs-before.Syncs)/float64(b.N), "fsyncs/op")
			if m.LastSeq != uint64(n+b.N) {
				b.Fatalf("last seq %d", m.LastSeq)
			}
		})
	}
}

// BenchmarkReadNewest50: the replay read of a resume, the newest 50 of
// 5000 entries.
func BenchmarkReadNewest50(b *testing.B) {
	l := newTestLog(b)
	m := mustCreate(b, l, activeMeta("big"))
	prefill(b, l, m, 1, 5000)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		es, err := l.ReadBefore("big", 0, 50)
		if err != nil {
			b.Fatal(err)
		}
		if len(es) != 50 || es[0].Seq != 4951 || es[49].Seq != 5000 {
			b.Fatalf("read %d entries, %d..%d", len(es), es[0].Seq, es[len(es)-1].Seq)
		}
	}
	b.StopTimer()
	b.ReportMetric(50, "entries/op")
}
