package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// keysOf lists every key stored for sid (metadata, entries, send ids).
func keysOf(tb testing.TB, l *Log, sid string) [][]byte {
	tb.Helper()
	it, err := l.db.NewIter(nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer it.Close()
	var out [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if bytes.Equal(k, metaKey(sid)) ||
			bytes.HasPrefix(k, sessionPrefix(prefixEntry, sid)) ||
			bytes.HasPrefix(k, sessionPrefix(prefixSend, sid)) {
			out = append(out, bytes.Clone(k))
		}
	}
	if err := it.Error(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// fillSession creates sid with n entries and a send id per entry, and
// releases it unless keepClaim.
func fillSession(tb testing.TB, l *Log, m Meta, n uint64, keepClaim bool) {
	tb.Helper()
	mustCreate(tb, l, m)
	if n > 0 {
		b := batch(m, 1, 1, n)
		b.Sends = map[string]uint64{}
		for s := uint64(1); s <= n; s++ {
			b.Sends[fmt.Sprint("send-", s)] = s
		}
		mustAppend(tb, l, b)
	}
	if !keepClaim {
		if err := l.Release(context.Background(), m.SessionID, 1); err != nil {
			tb.Fatal(err)
		}
	}
}

func checkIntact(tb testing.TB, l *Log, sid string, n uint64) {
	tb.Helper()
	m := mustMeta(tb, l, sid)
	if m.LastSeq != n {
		tb.Fatalf("%s: last seq %d, want %d", sid, m.LastSeq, n)
	}
	checkEntries(tb, sid, readAll(tb, l, sid), span(1, n))
	for s := uint64(1); s <= n; s++ {
		if seq, ok, err := l.SendSeq(sid, fmt.Sprint("send-", s)); !ok || err != nil || seq != s {
			tb.Fatalf("%s: SendSeq send-%d = %d, %v, %v", sid, s, seq, ok, err)
		}
	}
	if want := 1 + 2*int(n); len(keysOf(tb, l, sid)) != want {
		tb.Fatalf("%s: %d keys, want %d", sid, len(keysOf(tb, l, sid)), want)
	}
}

func checkGone(tb testing.TB, l *Log, sid string) {
	tb.Helper()
	if _, err := l.Meta(sid); !errors.Is(err, ErrNotFound) {
		tb.Fatalf("%s: Meta after delete: %v, want ErrNotFound", sid, err)
	}
	if es := readAll(tb, l, sid); len(es) != 0 {
		tb.Fatalf("%s: entries after delete: %v", sid, seqs(es))
	}
	if _, ok, err := l.SendSeq(sid, "send-1"); ok || err != nil {
		tb.Fatalf("%s: send id after delete (ok=%v err=%v)", sid, ok, err)
	}
	if ks := keysOf(tb, l, sid); len(ks) != 0 {
		tb.Fatalf("%s: keys left after delete: %q", sid, ks)
	}
}

// ---- 5. DeleteSession ----

func TestDeleteSession(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	// Ids that are prefixes of each other, on both sides of "abc".
	fillSession(t, l, activeMeta("ab"), 3, false)
	fillSession(t, l, activeMeta("abc"), 5, false)
	fillSession(t, l, activeMeta("abcd"), 4, false)
	fillSession(t, l, activeMeta("abc0"), 2, false)
	fillSession(t, l, activeMeta("claimed"), 2, true)

	ok, err := l.DeleteSession(ctx, "abc", nil)
	if err != nil || !ok {
		t.Fatalf("DeleteSession(abc) = %v, %v", ok, err)
	}
	checkGone(t, l, "abc")
	checkIntact(t, l, "ab", 3)
	checkIntact(t, l, "abcd", 4)
	checkIntact(t, l, "abc0", 2)

	// Deleting again, or an unknown session, is a no-op.
	for _, sid := range []string{"abc", "never"} {
		if ok, err := l.DeleteSession(ctx, sid, nil); ok || err != nil {
			t.Fatalf("DeleteSession(%s) = %v, %v; want false, nil", sid, ok, err)
		}
	}

	// A claimed session is kept, whatever cond says.
	calls := 0
	if ok, err := l.DeleteSession(ctx, "claimed", func(Meta) bool { calls++; return true }); ok || err != nil {
		t.Fatalf("DeleteSession(claimed) = %v, %v; want false, nil", ok, err)
	}
	checkIntact(t, l, "claimed", 2)

	// cond sees the current metadata and can refuse.
	var seen Meta
	if ok, err := l.DeleteSession(ctx, "abcd", func(m Meta) bool { seen = m; return false }); ok || err != nil {
		t.Fatalf("DeleteSession(abcd, false) = %v, %v; want false, nil", ok, err)
	}
	if seen.SessionID != "abcd" || seen.LastSeq != 4 {
		t.Fatalf("cond saw %+v", seen)
	}
	checkIntact(t, l, "abcd", 4)
	if ok, err := l.DeleteSession(ctx, "abcd", func(m Meta) bool { return m.LastSeq == 4 }); !ok || err != nil {
		t.Fatalf("DeleteSession(abcd, true) = %v, %v", ok, err)
	}
	checkGone(t, l, "abcd")
	checkIntact(t, l, "ab", 3)
	checkIntact(t, l, "abc0", 2)

	// After its release the formerly claimed session can go.
	if err := l.Release(ctx, "claimed", 1); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.DeleteSession(ctx, "claimed", nil); !ok || err != nil {
		t.Fatalf("DeleteSession(claimed) after release = %v, %v", ok, err)
	}
	checkGone(t, l, "claimed")
	if st := l.Stats(); st.Deleted != 3 {
		t.Fatalf("Stats.Deleted = %d, want 3", st.Deleted)
	}

	// A deleted id can be created again, from scratch.
	m := mustCreate(t, l, activeMeta("abc"))
	if m.Epoch != 1 || m.LastSeq != 0 {
		t.Fatalf("re-created %+v", m)
	}
	if es := readAll(t, l, "abc"); len(es) != 0 {
		t.Fatalf("re-created session has old entries %v", seqs(es))
	}
	mustAppend(t, l, batch(activeMeta("abc"), 1, 1, 1))
}

// ---- 6. Sweep ----

func TestDeletable(t *testing.T) {
	now := t0
	ret := time.Hour
	old, recent := now.Add(-2*ret), now.Add(-ret/2)
	cases := []struct {
		name string
		m    Meta
		want bool
	}{
		{"completed old", Meta{Status: StatusCompleted, LastActiveAt: old}, true},
		{"expired old", Meta{Status: StatusExpired, LastActiveAt: old}, true},
		{"completed exactly retention", Meta{Status: StatusCompleted, LastActiveAt: now.Add(-ret)}, true},
		{"completed just inside retention", Meta{Status: StatusCompleted, LastActiveAt: now.Add(-ret + time.Nanosecond)}, false},
		{"completed recent", Meta{Status: StatusCompleted, LastActiveAt: recent}, false},
		{"interrupted window over, old", Meta{Status: StatusInterrupted, LastActiveAt: old, ExpiresAt: old.Add(5 * time.Minute)}, true},
		{"interrupted window ends now, old", Meta{Status: StatusInterrupted, LastActiveAt: old, ExpiresAt: now}, true},
		{"interrupted window open, old", Meta{Status: StatusInterrupted, LastActiveAt: old, ExpiresAt: now.Add(time.Second)}, false},
		{"interrupted window over, recent", Meta{Status: StatusInterrupted, LastActiveAt: recent, ExpiresAt: now.Add(-time.Minute)}, false},
		{"interrupted without window", Meta{Status: StatusInterrupted, LastActiveAt: old}, false},
		{"active old", Meta{Status: StatusActive, LastActiveAt: old, ExpiresAt: old}, false},
	}
	for _, c := range cases {
		if got := Deletable(c.m, now, ret); got != c.want {
			t.Errorf("%s: Deletable = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSweep(t *testing.T) {
	var clock atomic.Pointer[time.Time]
	setNow := func(tm time.Time) { clock.Store(&tm) }
	setNow(t0)
	l := newTestLog(t, func(c *Config) {
		c.Retention = time.Hour
		c.Now = func() time.Time { return *clock.Load() }
	})
	ctx := context.Background()
	meta := func(sid string, st Status, lastActive, expires time.Duration) Meta {
		m := activeMeta(sid)
		m.Status = st
		m.LastActiveAt = t0.Add(lastActive)
		if expires != 0 {
			m.InterruptedAt = m.LastActiveAt
			m.ExpiresAt = t0.Add(expires)
		}
		return m
	}
	type sess struct {
		m       Meta
		claimed bool
		gone1   bool // deleted by the sweep at t0
		gone2   bool // deleted by the sweep at t0+1h
	}
	h := time.Hour
	all := []sess{
		{m: meta("completed-old", StatusCompleted, -2*h, 0), gone1: true},
		{m: meta("expired-old", StatusExpired, -2*h, 0), gone1: true},
		{m: meta("completed-at-retention", StatusCompleted, -h, 0), gone1: true},
		{m: meta("interrupted-expired-old", StatusInterrupted, -2*h, -2*h+5*time.Minute), gone1: true},
		{m: meta("completed-recent", StatusCompleted, -10*time.Minute, 0), gone2: true},
		{m: meta("interrupted-expired-recent", StatusInterrupted, -10*time.Minute, -5*time.Minute), gone2: true},
		{m: meta("interrupted-window-open", StatusInterrupted, -2*h, 30*time.Minute), gone2: true},
		{m: meta("interrupted-no-window", StatusInterrupted, -2*h, 0)},
		{m: meta("active-old", StatusActive, -5*h, 0)},
		{m: meta("active-new", StatusActive, 0, 0)},
		{m: meta("completed-claimed", StatusCompleted, -2*h, 0), claimed: true},
	}
	for _, s := range all {
		fillSession(t, l, s.m, 3, s.claimed)
	}
	check := func(round int) {
		t.Helper()
		for _, s := range all {
			gone := s.gone1 || (round >= 2 && s.gone2)
			if gone {
				checkGone(t, l, s.m.SessionID)
			} else {
				checkIntact(t, l, s.m.SessionID, 3)
			}
		}
	}

	n, err := l.Sweep(ctx)
	if err != nil || n != 4 {
		t.Fatalf("Sweep at t0 = %d, %v; want 4", n, err)
	}
	check(1)
	if n, err := l.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second Sweep at t0 = %d, %v; want 0", n, err)
	}

	setNow(t0.Add(h))
	if n, err := l.Sweep(ctx); err != nil || n != 3 {
		t.Fatalf("Sweep at t0+1h = %d, %v; want 3", n, err)
	}
	check(2)

	// Release the claimed one: now it goes.
	if err := l.Release(ctx, "completed-claimed", 1); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep after release = %d, %v; want 1", n, err)
	}
	checkGone(t, l, "completed-claimed")
	if st := l.Stats(); st.Deleted != 8 {
		t.Fatalf("Stats.Deleted = %d, want 8", st.Deleted)
	}

	// A session that is over but became active again before the sweep is
	// kept.
	fillSession(t, l, meta("revived", StatusCompleted, -2*h, 0), 1, true)
	m := mustMeta(t, l, "revived")
	m.Status = StatusActive
	mustAppend(t, l, Batch{SessionID: "revived", Epoch: 1, Meta: m})
	if err := l.Release(ctx, "revived", 1); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep with revived session = %d, %v; want 0", n, err)
	}
	checkIntact(t, l, "revived", 1)
}

func TestSweepCancelled(t *testing.T) {
	l := newTestLog(t, func(c *Config) { c.Now = func() time.Time { return t0 } })
	for i := 0; i < 3; i++ {
		m := activeMeta(fmt.Sprint("done-", i))
		m.Status, m.LastActiveAt = StatusCompleted, t0.Add(-2*time.Hour)
		fillSession(t, l, m, 1, false)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Sweep(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sweep with cancelled ctx: %v", err)
	}
	for i := 0; i < 3; i++ {
		checkIntact(t, l, fmt.Sprint("done-", i), 1)
	}
}

// The background sweeper deletes on its own; this waits for the commit
// that does it (signalled by OnCommit) rather than for a fixed time.
func TestBackgroundSweeper(t *testing.T) {
	commits := make(chan struct{}, 1)
	l := newTestLog(t, func(c *Config) {
		c.SweepInterval = time.Millisecond
		c.Now = func() time.Time { return t0 }
		c.OnCommit = func(int, int) {
			select {
			case commits <- struct{}{}:
			default:
			}
		}
	})
	m := activeMeta("old")
	m.Status, m.LastActiveAt = StatusCompleted, t0.Add(-2*time.Hour)
	fillSession(t, l, m, 2, false)
	fillSession(t, l, activeMeta("live"), 2, false)
	deadline := time.After(20 * time.Second)
	for {
		if _, err := l.Meta("old"); errors.Is(err, ErrNotFound) {
			break
		}
		select {
		case <-commits:
		case <-deadline:
			t.Fatal("the background sweeper did not delete the old session")
		}
	}
	checkGone(t, l, "old")
	checkIntact(t, l, "live", 2)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// Close while the background sweeper is deleting: the sweeper's next
// DeleteSession can be queued after the committer has stopped (submit's
// select has its send, l.stop and ctx.Done all ready and picks one at
// random), so it waits forever for its request, and Close waits forever
// for the sweeper. Each round has a fair chance of hanging.
func TestCloseDuringBackgroundSweep(t *testing.T) {
	for round := 1; round <= 20; round++ {
		commits := make(chan struct{}, 1)
		l, err := New(Config{
			Dir:           t.TempDir(),
			Logger:        quiet,
			SweepInterval: time.Millisecond,
			Now:           func() time.Time { return t0 },
			OnCommit: func(int, int) {
				select {
				case commits <- struct{}{}:
				default:
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		// Many unclaimed, deletable sessions, written in one batch so a
		// sweep sees all of them.
		b := l.db.NewBatch()
		for i := 0; i < 200; i++ {
			m := activeMeta(fmt.Sprintf("s%03d", i))
			m.Status, m.LastActiveAt = StatusCompleted, t0.Add(-2*time.Hour)
			v, err := encode(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Set(metaKey(m.SessionID), v, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(nil); err != nil {
			t.Fatal(err)
		}
		b.Close()
		<-commits // the sweeper has deleted its first session

		closed := make(chan error, 1)
		go func() { closed <- l.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second):
			// Complete the orphaned request so the sweeper and Close can
			// finish and nothing leaks.
			r := <-l.reqs
			r.err = ErrClosed
			close(r.done)
			<-closed
			t.Fatalf("round %d: Close deadlocked with the background sweeper (a DeleteSession was queued after the committer stopped)", round)
		}
	}
}
