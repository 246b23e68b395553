package wal

import (
	"bytes"
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

// prefill appends entries 1..n to h's session in batches of 500 and
// returns the header as of the last one.
func prefill(tb testing.TB, l *Log, h Header, epoch uint64, n int) Header {
	tb.Helper()
	const chunk = 500
	es := make([]Entry, 0, chunk)
	for s := uint64(1); s <= uint64(n); {
		es = es[:0]
		for ; s <= uint64(n) && len(es) < chunk; s++ {
			es = append(es, benchEntry(s))
		}
		h.LastSeq = es[len(es)-1].Seq
		mustAppend(tb, l, Batch{SessionID: h.SessionID, Epoch: epoch, Entries: es, Header: h})
	}
	return h
}

// appendOne durably appends the entry after h.LastSeq and advances h. The
// batch carries no context: the stored one is kept.
func appendOne(l *Log, h *Header, epoch uint64) error {
	seq := h.LastSeq + 1
	h.LastSeq = seq
	return l.Append(context.Background(), Batch{
		SessionID: h.SessionID,
		Epoch:     epoch,
		Entries:   []Entry{benchEntry(seq)},
		Header:    *h,
	})
}

// BenchmarkAppendDurable: one op is one durable Append of one ~256-byte
// entry plus the session's header. With sessions=64, 64 goroutines each
// own one session and share b.N between them, so concurrent appends can
// share fsyncs (group commit).
func BenchmarkAppendDurable(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) { benchAppendDurable(b, n) })
	}
}

func benchAppendDurable(b *testing.B, sessions int) {
	l := newTestLog(b)
	headers := make([]Header, sessions)
	for i := range headers {
		headers[i] = mustCreate(b, l, activeHeader(fmt.Sprintf("bench-%02d", i)))
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
		go func(h Header, n int) {
			defer wg.Done()
			<-start
			for range n {
				if err := appendOne(l, &h, 1); err != nil {
					errs <- err
					return
				}
			}
		}(headers[i], n)
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
			h := mustCreate(b, l, activeHeader("big"))
			h = prefill(b, l, h, 1, n)
			before := l.Stats()
			b.ResetTimer()
			for range b.N {
				if err := appendOne(l, &h, 1); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(l.Stats().Syncs-before.Syncs)/float64(b.N), "fsyncs/op")
			if h.LastSeq != uint64(n+b.N) {
				b.Fatalf("last seq %d", h.LastSeq)
			}
		})
	}
}

// BenchmarkAppendContextSize: single-entry durable appends to a session
// with no context and to one with a 60 KiB context. The context is kept
// apart from the header and written only when it changes, so ns/op and
// the bytes written to Pebble's WAL per append should be the same.
func BenchmarkAppendContextSize(b *testing.B) {
	for _, size := range []int{0, 60 << 10} {
		b.Run(fmt.Sprintf("context=%dB", size), func(b *testing.B) {
			l := newTestLog(b)
			var c []byte
			if size > 0 {
				c = bytes.Repeat([]byte("c"), size)
			}
			h, err := l.Create(context.Background(), activeHeader("ctx"), c)
			if err != nil {
				b.Fatal(err)
			}
			h = prefill(b, l, h, 1, 50)
			walBefore := l.db.Metrics().WAL.BytesIn
			b.ResetTimer()
			for range b.N {
				if err := appendOne(l, &h, 1); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(l.db.Metrics().WAL.BytesIn-walBefore)/float64(b.N), "walbytes/op")
		})
	}
}

// BenchmarkReadNewest50: the replay read of a resume, the newest 50 of
// 5000 entries.
func BenchmarkReadNewest50(b *testing.B) {
	l := newTestLog(b)
	h := mustCreate(b, l, activeHeader("big"))
	h = prefill(b, l, h, 1, 5000)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		es, err := l.Read("big", 1, h.LastSeq+1, 50, true)
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

// BenchmarkReadRaw1000: the stored bytes of a long replay, 1,000 entries
// of 5,000, each checked as ReadRaw checks them. Its entries carry the
// metadata a chat's do (a client id, a reply_to).
func BenchmarkReadRaw1000(b *testing.B) {
	l := newTestLog(b)
	h := mustCreate(b, l, activeHeader("big"))
	es := make([]Entry, 0, 500)
	for s := uint64(1); s <= 5000; s++ {
		e := benchEntry(s)
		e.Time += 0.123456789
		if s%2 == 0 {
			e.Role, e.Metadata = "agent", map[string]any{"reply_to": s - 1}
		} else {
			e.Metadata = map[string]any{"id": fmt.Sprintf("m%d", s)}
		}
		if es = append(es, e); len(es) == cap(es) {
			h.LastSeq = s
			mustAppend(b, l, Batch{SessionID: h.SessionID, Epoch: 1, Entries: es, Header: h})
			es = es[:0]
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		es, err := l.ReadRaw("big", 4001, 5001, 1000, false)
		if err != nil || len(es) != 1000 {
			b.Fatalf("read %d entries: %v", len(es), err)
		}
	}
}
