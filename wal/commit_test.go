package wal

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestGroupCommitConcurrentSessions(t *testing.T) {
	const sessions, perSession = 64, 20
	var cbRequests, cbEntries, cbCalls int64
	l := newTestLog(t, func(c *Config) {
		// OnCommit runs on the committer goroutine only.
		c.OnCommit = func(requests, entries int) {
			cbCalls++
			cbRequests += int64(requests)
			cbEntries += int64(entries)
		}
	})
	ctx := context.Background()
	start := make(chan struct{})
	errs := make(chan error, sessions)
	for i := 0; i < sessions; i++ {
		sid := fmt.Sprintf("g%02d", i)
		go func() {
			base := activeMeta(sid)
			if _, err := l.Create(ctx, base); err != nil {
				errs <- err
				return
			}
			<-start
			for s := uint64(1); s <= perSession; s++ {
				b := batch(base, 1, s, s)
				b.Sends = map[string]uint64{fmt.Sprint("send-", s): s}
				if err := l.Append(ctx, b); err != nil {
					errs <- fmt.Errorf("%s seq %d: %w", sid, s, err)
					return
				}
			}
			errs <- nil
		}()
	}
	close(start)
	for i := 0; i < sessions; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < sessions; i++ {
		sid := fmt.Sprintf("g%02d", i)
		checkEntries(t, sid, readAll(t, l, sid), span(1, perSession))
		if m := mustMeta(t, l, sid); m.LastSeq != perSession || m.Epoch != 1 {
			t.Fatalf("%s meta %+v", sid, m)
		}
		if seq, ok, err := l.SendSeq(sid, fmt.Sprint("send-", perSession)); !ok || err != nil || seq != perSession {
			t.Fatalf("%s SendSeq = %d, %v, %v", sid, seq, ok, err)
		}
	}
	st := l.Stats()
	total := uint64(sessions * (perSession + 1)) // creates + appends
	if st.Requests != total || st.Entries != sessions*perSession {
		t.Fatalf("stats %+v, want %d requests, %d entries", st, total, sessions*perSession)
	}
	if st.Syncs >= st.Requests {
		t.Fatalf("no group commit: %d syncs for %d requests", st.Syncs, st.Requests)
	}
	// Close so that reading the callback's counters is ordered after the
	// committer's last write to them.
	l.Close()
	if uint64(cbRequests) != st.Requests || uint64(cbEntries) != st.Entries || uint64(cbCalls) != st.Syncs {
		t.Fatalf("OnCommit saw %d calls, %d requests, %d entries; stats %+v", cbCalls, cbRequests, cbEntries, st)
	}
	t.Logf("group commit: %d requests in %d fsyncs (%.1f per fsync)", st.Requests, st.Syncs, float64(st.Requests)/float64(st.Syncs))
}

// MaxBatch 1 turns group commit off: one fsync per write request.
func TestMaxBatchOne(t *testing.T) {
	l := newTestLog(t, func(c *Config) { c.MaxBatch = 1 })
	ctx := context.Background()
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		sid := fmt.Sprint("mb", i)
		go func() {
			base := activeMeta(sid)
			_, err := l.Create(ctx, base)
			for s := uint64(1); s <= 5 && err == nil; s++ {
				err = l.Append(ctx, batch(base, 1, s, s))
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if st := l.Stats(); st.Syncs != st.Requests || st.Requests != 48 {
		t.Fatalf("stats %+v, want 48 requests in 48 fsyncs", st)
	}
	for i := 0; i < 8; i++ {
		checkEntries(t, "mb", readAll(t, l, fmt.Sprint("mb", i)), span(1, 5))
	}
}

// commitGroup is driven directly here to pin down what one group does
// with a mix of good and bad requests: each request is applied in order
// and sees the ones before it, a failing request leaves nothing of itself,
// and the rest share one fsync.
func TestCommitGroupMixed(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	mustCreate(t, l, activeMeta("x"))
	mustCreate(t, l, activeMeta("y"))
	mustAppend(t, l, batch(activeMeta("y"), 1, 1, 2))
	if err := l.Release(ctx, "y", 1); err != nil {
		t.Fatal(err)
	}
	before := l.Stats()

	bad := batch(activeMeta("x"), 1, 5, 5) // gap
	bad.Sends = map[string]uint64{"bad": 5}
	badMeta := bad.Meta
	badMeta.Status = StatusCompleted
	bad.Meta = badMeta
	reqs := []*request{
		{kind: reqAppend, sid: "x", batch: batch(activeMeta("x"), 1, 1, 2)},
		{kind: reqAppend, sid: "x", batch: bad},
		{kind: reqAppend, sid: "x", batch: batch(activeMeta("x"), 1, 3, 4)}, // sees 1..2 staged
		{kind: reqCreate, sid: "z", batch: Batch{Meta: activeMeta("z")}},
		{kind: reqAppend, sid: "z", batch: batch(activeMeta("z"), 1, 1, 1)}, // sees the staged claim
		{kind: reqCreate, sid: "z", batch: Batch{Meta: activeMeta("z")}},    // sees the staged meta
		{kind: reqClaim, sid: "x"},                                          // epoch 2, last seq 4
		{kind: reqAppend, sid: "x", batch: batch(activeMeta("x"), 1, 5, 5)}, // stale now
		{kind: reqAppend, sid: "x", batch: batch(activeMeta("x"), 2, 5, 5)},
		{kind: reqDelete, sid: "y"},
		{kind: reqClaim, sid: "y"}, // deleted earlier in the group
	}
	for _, r := range reqs {
		r.done = make(chan struct{})
	}
	l.commitGroup(reqs)

	wantErr := []error{nil, ErrSeqGap, nil, nil, nil, ErrExists, nil, ErrStaleEpoch, nil, nil, ErrNotFound}
	for i, r := range reqs {
		select {
		case <-r.done:
		default:
			t.Fatalf("request %d not completed", i)
		}
		if (wantErr[i] == nil) != (r.err == nil) || (wantErr[i] != nil && !errors.Is(r.err, wantErr[i])) {
			t.Fatalf("request %d: %v, want %v", i, r.err, wantErr[i])
		}
	}
	if reqs[6].meta.Epoch != 2 || reqs[6].meta.LastSeq != 4 {
		t.Fatalf("claim in group saw %+v", reqs[6].meta)
	}
	if !reqs[9].deleted {
		t.Fatal("delete in group did not delete")
	}
	after := l.Stats()
	if after.Syncs-before.Syncs != 1 || after.Requests-before.Requests != uint64(len(reqs)) ||
		after.Entries-before.Entries != 6 || after.Deleted-before.Deleted != 1 {
		t.Fatalf("stats delta: before %+v after %+v", before, after)
	}
	checkEntries(t, "x", readAll(t, l, "x"), span(1, 5))
	if m := mustMeta(t, l, "x"); m.Epoch != 2 || m.LastSeq != 5 || m.Status != StatusActive {
		t.Fatalf("x meta %+v", m)
	}
	if _, ok, _ := l.SendSeq("x", "bad"); ok {
		t.Fatal("the failed request's send id was stored")
	}
	checkEntries(t, "z", readAll(t, l, "z"), span(1, 1))
	if _, err := l.Meta("y"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("y: %v", err)
	}
	// The published claims are the ones the group ended with.
	mustAppend(t, l, batch(activeMeta("x"), 2, 6, 6))
	mustAppend(t, l, batch(activeMeta("z"), 1, 2, 2))
}

func TestCancelledContextBeforeQueue(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeMeta("k"))
	// submit may still queue a request whose context is already done (its
	// select has both cases ready); either way "nil" must mean stored and
	// an error must mean not stored.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	next := uint64(1)
	for i := 0; i < 20; i++ {
		err := l.Append(ctx, batch(activeMeta("k"), 1, next, next))
		switch {
		case err == nil:
			next++
		case errors.Is(err, context.Canceled):
		default:
			t.Fatal(err)
		}
	}
	checkEntries(t, "k", readAll(t, l, "k"), span(1, next-1))
}

// ---- 8. alive mark ----

func TestMarkAlive(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := New(Config{Dir: dir, SweepInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if tm, ok, err := l.LastAlive(); ok || err != nil || !tm.IsZero() {
		t.Fatalf("LastAlive on a new log = %v, %v, %v", tm, ok, err)
	}
	t1 := time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC)
	if err := l.MarkAlive(ctx, t1); err != nil {
		t.Fatal(err)
	}
	if tm, ok, err := l.LastAlive(); !ok || err != nil || !tm.Equal(t1) {
		t.Fatalf("LastAlive = %v, %v, %v; want %v", tm, ok, err, t1)
	}
	t2 := t1.Add(time.Minute)
	if err := l.MarkAlive(ctx, t2); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir)
	if tm, ok, err := l.LastAlive(); !ok || err != nil || !tm.Equal(t2) {
		t.Fatalf("LastAlive after reopen = %v, %v, %v; want %v", tm, ok, err, t2)
	}
	// The alive mark is not session metadata.
	n := 0
	if err := l.ScanMeta(ctx, func(Meta) error { n++; return nil }, func(err error) { t.Errorf("corrupt: %v", err) }); err != nil || n != 0 {
		t.Fatalf("ScanMeta saw %d sessions, err %v", n, err)
	}
}
