package wal

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestNoSyncAppend: header-only NoSync appends get no fsync of their own,
// are readable at once, complete in order with synced appends around
// them, and are durable once a later synced write (or Close) follows.
func TestNoSyncAppend(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	ctx := context.Background()
	h := mustCreate(t, l, activeHeader("ns"))

	status := func(st Status) Batch {
		b := batch(h, 1, 1, 0)
		b.Header.Status, b.NoSync = st, true
		return b
	}
	before := l.Stats().Syncs
	for range 5 {
		if err := l.Append(ctx, status(StatusInterrupted)); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.Stats().Syncs; got != before {
		t.Fatalf("NoSync appends made %d fsyncs", got-before)
	}
	if got, err := l.Header("ns"); err != nil || got.Status != StatusInterrupted {
		t.Fatalf("header after a NoSync append: %+v %v", got, err)
	}

	// In order with synced appends, whatever groups they fall into.
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i := range 40 {
		var b Batch
		name := fmt.Sprint("nosync-", i)
		if i%3 == 0 {
			seq := uint64(i/3 + 1)
			b, name = batch(h, 1, seq, seq), fmt.Sprint("sync-", i)
		} else {
			b = status(StatusActive)
			b.Header.LastSeq = uint64(i/3 + 1)
		}
		wg.Add(1)
		if err := l.AppendAsync(ctx, ref(b), func(err error) {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i, name := range order {
		if want := fmt.Sprint("nosync-", i); i%3 == 0 {
			want = fmt.Sprint("sync-", i)
			if name != want {
				t.Fatalf("completion %d is %s, want %s", i, name, want)
			}
		} else if name != want {
			t.Fatalf("completion %d is %s, want %s", i, name, want)
		}
	}
	if l.Stats().Syncs == before {
		t.Fatal("synced appends made no fsync")
	}

	// The last write was a NoSync one: Close keeps it.
	if err := l.Append(ctx, func() Batch { b := status(StatusInterrupted); b.Header.LastSeq = 14; return b }()); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir)
	if got, err := l.Header("ns"); err != nil || got.Status != StatusInterrupted || got.LastSeq != 14 {
		t.Fatalf("after reopening: %+v %v", got, err)
	}
	checkEntries(t, "ns", readAll(t, l, "ns"), span(1, 14))
}
