package wal

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// Concurrent durable appends of many sessions share fsyncs. Each caller
// waits for its own append, so at most one request per session is in
// flight: whatever is queued while an fsync runs goes into the next one.
func TestGroupCommitConcurrentSessions(t *testing.T) {
	const sessions, perSession = 64, 20
	var cbRequests, cbEntries int64
	l := newTestLog(t, func(c *Config) {
		// OnCommit runs on the committer goroutine only.
		c.OnCommit = func(requests, entries int) {
			cbRequests += int64(requests)
			cbEntries += int64(entries)
		}
	})
	ctx := context.Background()
	for i := range sessions {
		mustCreate(t, l, activeHeader(fmt.Sprintf("g%02d", i)))
	}
	before := l.Stats()
	start := make(chan struct{})
	errs := make(chan error, sessions)
	for i := range sessions {
		sid := fmt.Sprintf("g%02d", i)
		go func() {
			<-start
			for s := uint64(1); s <= perSession; s++ {
				b := batch(activeHeader(sid), 1, s, s)
				b.Sends = []Send{{ID: fmt.Sprint("send-", s), Seq: s}}
				if err := l.Append(ctx, b); err != nil {
					errs <- fmt.Errorf("%s seq %d: %w", sid, s, err)
					return
				}
			}
			errs <- nil
		}()
	}
	close(start)
	for range sessions {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st := l.Stats()
	reqs, syncs := st.Requests-before.Requests, st.Syncs-before.Syncs
	if reqs != sessions*perSession || st.Entries-before.Entries != sessions*perSession {
		t.Fatalf("stats %+v (before %+v), want %d requests and entries", st, before, sessions*perSession)
	}
	t.Logf("group commit: %d requests in %d fsyncs (%.1f per fsync)", reqs, syncs, float64(reqs)/float64(syncs))
	// One fsync per request would be 1280; with 64 writers waiting the
	// groups are far larger than 2 on any machine.
	if syncs*2 > reqs {
		t.Fatalf("no group commit: %d fsyncs for %d requests", syncs, reqs)
	}
	for i := range sessions {
		sid := fmt.Sprintf("g%02d", i)
		checkEntries(t, sid, readAll(t, l, sid), span(1, perSession))
		if seq, ok, err := l.SendSeq(sid, fmt.Sprint("send-", perSession)); !ok || err != nil || seq != perSession {
			t.Fatalf("%s SendSeq = %d, %v, %v", sid, seq, ok, err)
		}
	}
	// Close so that reading the callback's counters is ordered after the
	// committer's last write to them.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if uint64(cbRequests) != st.Requests || uint64(cbEntries) != st.Entries {
		t.Fatalf("OnCommit saw %d requests, %d entries; stats %+v", cbRequests, cbEntries, st)
	}
}

// Queued asynchronous appends are committed many to an fsync: the
// committer takes everything waiting, up to MaxBatch.
func TestGroupCommitAsync(t *testing.T) {
	const sessions, perSession = 8, 250
	l := newTestLog(t, func(c *Config) { c.MaxBatch = 64 })
	ctx := context.Background()
	for i := range sessions {
		mustCreate(t, l, activeHeader(fmt.Sprintf("q%d", i)))
	}
	before := l.Stats()
	var wg sync.WaitGroup
	wg.Add(sessions * perSession)
	errs := make(chan error, sessions*perSession)
	for i := range sessions {
		sid := fmt.Sprintf("q%d", i)
		go func() {
			for s := uint64(1); s <= perSession; s++ {
				err := l.AppendAsync(ctx, ref(batch(activeHeader(sid), 1, s, s)), func(err error) {
					if err != nil {
						errs <- err
					}
					wg.Done()
				})
				if err != nil {
					errs <- err
					wg.Done()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := l.Stats()
	reqs, syncs := st.Requests-before.Requests, st.Syncs-before.Syncs
	t.Logf("async group commit: %d requests in %d fsyncs (%.1f per fsync)", reqs, syncs, float64(reqs)/float64(syncs))
	if reqs != sessions*perSession {
		t.Fatalf("%d requests committed, want %d", reqs, sessions*perSession)
	}
	// No group may exceed MaxBatch, so at least reqs/64 fsyncs; and the
	// producers queue much faster than fsyncs complete.
	if syncs < reqs/64 || syncs*4 > reqs {
		t.Fatalf("%d fsyncs for %d requests with MaxBatch 64", syncs, reqs)
	}
	for i := range sessions {
		sid := fmt.Sprintf("q%d", i)
		checkEntries(t, sid, readAll(t, l, sid), span(1, perSession))
	}
}

// MaxBatch 1 turns group commit off: one fsync per write request.
func TestMaxBatchOne(t *testing.T) {
	l := newTestLog(t, func(c *Config) { c.MaxBatch = 1 })
	ctx := context.Background()
	errs := make(chan error, 8)
	for i := range 8 {
		sid := fmt.Sprint("mb", i)
		go func() {
			base := activeHeader(sid)
			_, err := l.Create(ctx, base, nil)
			for s := uint64(1); s <= 5 && err == nil; s++ {
				err = l.Append(ctx, batch(base, 1, s, s))
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if st := l.Stats(); st.Syncs != st.Requests || st.Requests != 48 {
		t.Fatalf("stats %+v, want 48 requests in 48 fsyncs", st)
	}
	for i := range 8 {
		checkEntries(t, "mb", readAll(t, l, fmt.Sprint("mb", i)), span(1, 5))
	}
}
