package wal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestNewRequiresDir(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without Dir succeeded")
	}
}

func TestCloseTwice(t *testing.T) {
	l, err := New(Config{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, l, activeHeader("c"))
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Every call after Close returns ErrClosed (never a Pebble panic, never a
// request that waits forever for a stopped committer).
func TestCallsAfterCloseReturnErrClosed(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	mustCreate(t, l, activeHeader("c"))
	mustAppend(t, l, batch(activeHeader("c"), 1, 1, 3))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	async := newAsync()
	ops := []struct {
		name string
		op   func() error
	}{
		{"Append", func() error { return l.Append(ctx, batch(activeHeader("c"), 1, 4, 4)) }},
		{"AppendAsync", func() error { return l.AppendAsync(ctx, ref(batch(activeHeader("c"), 1, 4, 4)), async.done) }},
		{"Create", func() error { _, err := l.Create(ctx, activeHeader("d"), nil); return err }},
		{"Claim", func() error { _, err := l.Claim(ctx, "c"); return err }},
		{"Release", func() error { return l.Release(ctx, "c", 1) }},
		{"DeleteSession", func() error { _, err := l.DeleteSession(ctx, "c", nil); return err }},
		{"MarkAlive", func() error { return l.MarkAlive(ctx, t0) }},
		{"Sweep", func() error { _, err := l.Sweep(ctx, t0, time.Hour); return err }},
		{"Header", func() error { _, err := l.Header("c"); return err }},
		{"Load", func() error { _, err := l.Load("c"); return err }},
		{"Read", func() error { _, err := l.Read("c", 1, 4, 10, false); return err }},
		{"Read newest", func() error { _, err := l.Read("c", 1, 4, 10, true); return err }},
		{"SendSeq", func() error { _, _, err := l.SendSeq("c", "x"); return err }},
		{"ScanSends", func() error { return l.ScanSends("c", func(string, uint64) {}) }},
		{"ScanHeaders", func() error { return l.ScanHeaders(ctx, func(Header) error { return nil }, nil) }},
		{"LastAlive", func() error { _, _, err := l.LastAlive(); return err }},
	}
	for _, o := range ops {
		// Several times: a select between a ready queue and a stopped
		// committer would pick at random.
		for range 8 {
			r := goCall(func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panicked: %v", p)
					}
				}()
				return o.op()
			})
			if err := r.wait(t); !errors.Is(err, ErrClosed) {
				t.Fatalf("%s after Close: %v, want ErrClosed", o.name, err)
			}
		}
	}
	async.none(t, "AppendAsync after Close")
	if st := l.Stats(); st.Entries != 3 {
		t.Fatalf("stats after Close %+v", st)
	}
}

// Requests still queued when Close is called fail with ErrClosed, the
// waiting callers and the callbacks alike, and none of them is written.
func TestCloseFailsQueuedRequests(t *testing.T) {
	// Each round has the committer choose between the queue and the stop;
	// several rounds make a wrong choice show.
	for round := range 6 {
		dir := t.TempDir()
		l := openLog(t, dir)
		ctx := context.Background()
		mustCreate(t, l, activeHeader("q"))
		release, _ := blockCommitter(t, l)

		var cbs []*asyncResult
		for s := uint64(1); s <= 5; s++ {
			r := newAsync()
			if err := l.AppendAsync(ctx, ref(batch(activeHeader("q"), 1, s, s)), r.done); err != nil {
				t.Fatal(err)
			}
			cbs = append(cbs, r)
		}
		create := goCall(func() error { _, err := l.Create(ctx, activeHeader("new"), nil); return err })
		waitQueued(t, l, 6)
		closed := goCall(l.Close)
		// Close has begun once the committer is told to stop.
		select {
		case <-l.stop:
		case <-time.After(30 * time.Second):
			t.Fatal("Close did not signal the committer")
		}
		release()
		if err := closed.wait(t); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		for i, r := range cbs {
			wantErr(t, fmt.Sprintf("round %d: queued append %d", round, i+1), r.wait(t), ErrClosed)
			r.none(t, "queued append")
		}
		wantErr(t, fmt.Sprintf("round %d: queued Create", round), create.wait(t), ErrClosed)

		l = openLog(t, dir)
		if h := mustHeader(t, l, "q"); h.LastSeq != 0 {
			t.Fatalf("round %d: a queued append was written after Close: %+v", round, h)
		}
		if _, err := l.Header("new"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("round %d: a queued Create was written after Close: %v", round, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

const holdDirEnv = "WAL_TEST_HOLD_DIR"

// A directory already open, in this process or in another one, is refused
// with an error that says it is in use.
func TestDirInUse(t *testing.T) {
	if dir := os.Getenv(holdDirEnv); dir != "" {
		holdDir(t, dir)
		return
	}
	dir := t.TempDir()

	// In this process.
	l := openLog(t, dir)
	running := goleak.IgnoreCurrent()
	if l2, err := New(Config{Dir: dir, Logger: quiet}); err == nil {
		l2.Close()
		t.Fatal("second New on an open directory succeeded")
	} else if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second New in this process: %v; want a message saying the directory is in use", err)
	}
	// The refused New left no goroutine behind (Pebble's disk-health
	// checker is stopped only by the closer of the FS it runs for).
	goleak.VerifyNone(t, running)
	// The refused New did not disturb the open log.
	mustCreate(t, l, activeHeader("still"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// In another process: this test binary, holding the directory open
	// until its stdin closes.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDirInUse$", "-test.count=1")
	cmd.Env = append(os.Environ(), holdDirEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if sc.Text() == "holding" {
			ready = true
			break
		}
	}
	if !ready {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("the child did not open %s", dir)
	}
	_, err = New(Config{Dir: dir, Logger: quiet})
	stdin.Close()
	for sc.Scan() { // drain until the child exits
	}
	if werr := cmd.Wait(); werr != nil {
		t.Fatalf("child: %v", werr)
	}
	if err == nil {
		t.Fatal("New on a directory another process holds succeeded")
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("New on a directory another process holds: %v; want a message saying it is in use", err)
	}
	// Once the other process is gone the directory opens again.
	l = openLog(t, dir)
	mustHeader(t, l, "still")
}

// holdDir is the child side of TestDirInUse.
func holdDir(t *testing.T, dir string) {
	l, err := New(Config{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatalf("child: New(%s): %v", dir, err)
	}
	fmt.Println("holding")
	buf := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(buf); err != nil {
			break
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// Only Pebble's own lock errors mean "in use"; an error that merely has
// "lock" in it (as "block" does) is not blamed on another process.
func TestIsLocked(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("open: %w", syscall.EAGAIN), true},
		{errors.New("lock held by current process"), true},
		{errors.New("pebble: corruption: block checksum mismatch"), false},
		{errors.New("open /x/LOCK: permission denied"), false},
		{errors.New("no such file or directory"), false},
	} {
		if got := isLocked(c.err); got != c.want {
			t.Errorf("isLocked(%q) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestMarkAlive(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := New(Config{Dir: dir, Logger: quiet})
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
	// The alive mark is not a session.
	n := 0
	if err := l.ScanHeaders(ctx, func(Header) error { n++; return nil }, func(ce *CorruptError) { t.Errorf("corrupt: %v", ce) }); err != nil || n != 0 {
		t.Fatalf("ScanHeaders saw %d sessions, err %v", n, err)
	}
}
