package wal

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := New(Config{Dir: dir, SweepInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	base := activeMeta("r")
	base.AgentContext = map[string]any{"summary": "so far"}
	base.Pending = &ToolCall{CallID: "c1", Name: "search", Status: "running", Partial: "half", StartedSeq: 19, ReplyTo: 18}
	mustCreate(t, l, base)
	for s := uint64(1); s <= 20; s += 4 {
		b := batch(base, 1, s, s+3)
		b.Sends = map[string]uint64{fmt.Sprintf("send-%d", s): s}
		mustAppend(t, l, b)
	}
	mustCreate(t, l, activeMeta("other"))
	alive := t0.Add(42 * time.Second)
	if err := l.MarkAlive(ctx, alive); err != nil {
		t.Fatal(err)
	}
	before := mustMeta(t, l, "r")
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	l = openLog(t, dir)
	after := mustMeta(t, l, "r")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("meta changed across reopen:\n got %+v\nwant %+v", after, before)
	}
	if after.LastSeq != 20 || after.Epoch != 1 || after.Pending == nil || after.Pending.Partial != "half" || after.AgentContext["summary"] != "so far" {
		t.Fatalf("meta after reopen %+v", after)
	}
	checkEntries(t, "after reopen", readAll(t, l, "r"), span(1, 20))
	for s := uint64(1); s <= 20; s += 4 {
		if seq, ok, err := l.SendSeq("r", fmt.Sprintf("send-%d", s)); !ok || err != nil || seq != s {
			t.Fatalf("SendSeq send-%d after reopen = %d, %v, %v", s, seq, ok, err)
		}
	}
	if m := mustMeta(t, l, "other"); m.Epoch != 1 || m.LastSeq != 0 {
		t.Fatalf("other %+v", m)
	}
	if got, ok, err := l.LastAlive(); err != nil || !ok || !got.Equal(alive) {
		t.Fatalf("LastAlive after reopen = %v, %v, %v", got, ok, err)
	}

	// Claims are not durable: the new process must claim again, and the
	// claim continues both the epoch and the seqs.
	if err := l.Append(ctx, batch(base, 1, 21, 21)); !errors.Is(err, ErrNotClaimed) {
		t.Fatalf("append after reopen without claim: %v, want ErrNotClaimed", err)
	}
	c, err := l.Claim(ctx, "r")
	if err != nil || c.Epoch != 2 || c.LastSeq != 20 {
		t.Fatalf("Claim after reopen = %+v, %v", c, err)
	}
	if err := l.Append(ctx, batch(base, 2, 20, 21)); !errors.Is(err, ErrSeqGap) {
		t.Fatalf("append overlapping the stored log: %v, want ErrSeqGap", err)
	}
	mustAppend(t, l, batch(base, 2, 21, 22))
	checkEntries(t, "after reopen+append", readAll(t, l, "r"), span(1, 22))
}

func TestNewRequiresDir(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without Dir succeeded")
	}
}

// The writers must answer ErrClosed once the log is closed. submit picks at
// random between enqueuing (the request channel is buffered and the
// committer has gone) and seeing l.stop, so about half the calls block
// forever on a request no goroutine will ever complete.
func TestWriteAfterCloseReturnsErrClosed(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	mustCreate(t, l, activeMeta("c"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func() error{
		"Append":    func() error { return l.Append(ctx, batch(activeMeta("c"), 1, 1, 1)) },
		"Create":    func() error { _, err := l.Create(ctx, activeMeta("d")); return err },
		"Claim":     func() error { _, err := l.Claim(ctx, "c"); return err },
		"Release":   func() error { return l.Release(ctx, "c", 1) },
		"Delete":    func() error { _, err := l.DeleteSession(ctx, "c", nil); return err },
		"MarkAlive": func() error { return l.MarkAlive(ctx, t0) },
	}
	for name, op := range ops {
		for i := 0; i < 16; i++ {
			res := make(chan error, 1)
			go func() { res <- op() }()
			select {
			case err := <-res:
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("%s after Close: %v, want ErrClosed", name, err)
				}
			case <-time.After(2 * time.Second):
				// Unblock the stuck caller (its request sits in l.reqs
				// and nothing reads it) so the goroutine does not leak.
				r := <-l.reqs
				r.err = ErrClosed
				close(r.done)
				<-res
				t.Fatalf("%s after Close blocked forever (call %d): the request was queued after the committer stopped", name, i+1)
			}
		}
	}
}

// Readers after Close must fail with an error; Pebble panics ("pebble:
// closed") when a closed DB is read, and the log passes that on.
func TestReadAfterCloseReturnsErrClosed(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeMeta("c"))
	mustAppend(t, l, batch(activeMeta("c"), 1, 1, 3))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		op   func() error
	}{
		{"Meta", func() error { _, err := l.Meta("c"); return err }},
		{"ReadAfter", func() error { _, err := l.ReadAfter("c", 0, 10); return err }},
		{"ReadBefore", func() error { _, err := l.ReadBefore("c", 0, 10); return err }},
		{"SendSeq", func() error { _, _, err := l.SendSeq("c", "x"); return err }},
		{"LastAlive", func() error { _, _, err := l.LastAlive(); return err }},
		{"ScanMeta", func() error {
			return l.ScanMeta(context.Background(), func(Meta) error { return nil }, nil)
		}},
		{"Sweep", func() error { _, err := l.Sweep(context.Background()); return err }},
	}
	for _, o := range ops {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s after Close panicked: %v", o.name, p)
				}
			}()
			if err := o.op(); !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", o.name, err)
			}
		}()
	}
}

// ---- 4. group commit ----
