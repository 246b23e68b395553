package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// keysOf lists every key stored for sid (header, context, entries, send
// ids).
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
		if bytes.Equal(k, headerKey(sid)) || bytes.Equal(k, contextKey(sid)) ||
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

// fillSession creates sid with header h, a context, n entries and a send
// id per entry, and releases it unless keepClaim.
func fillSession(tb testing.TB, l *Log, h Header, n uint64, keepClaim bool) {
	tb.Helper()
	if _, err := l.Create(context.Background(), h, []byte("ctx")); err != nil {
		tb.Fatal(err)
	}
	if n > 0 {
		b := batch(h, 1, 1, n)
		for s := uint64(1); s <= n; s++ {
			b.Sends = append(b.Sends, Send{ID: fmt.Sprint("send-", s), Seq: s})
		}
		mustAppend(tb, l, b)
	}
	if !keepClaim {
		mustRelease(tb, l, h.SessionID, 1)
	}
}

func checkIntact(tb testing.TB, l *Log, sid string, n uint64) {
	tb.Helper()
	if h := mustHeader(tb, l, sid); h.LastSeq != n {
		tb.Fatalf("%s: last seq %d, want %d", sid, h.LastSeq, n)
	}
	checkEntries(tb, sid, readAll(tb, l, sid), span(1, n))
	for s := uint64(1); s <= n; s++ {
		if seq, ok, err := l.SendSeq(sid, fmt.Sprint("send-", s)); !ok || err != nil || seq != s {
			tb.Fatalf("%s: SendSeq send-%d = %d, %v, %v", sid, s, seq, ok, err)
		}
	}
	if want := 2 + 2*int(n); len(keysOf(tb, l, sid)) != want {
		tb.Fatalf("%s: %d keys, want %d", sid, len(keysOf(tb, l, sid)), want)
	}
}

func checkGone(tb testing.TB, l *Log, sid string) {
	tb.Helper()
	if _, err := l.Header(sid); !errors.Is(err, ErrNotFound) {
		tb.Fatalf("%s: Header after delete: %v, want ErrNotFound", sid, err)
	}
	if ks := keysOf(tb, l, sid); len(ks) != 0 {
		tb.Fatalf("%s: keys left after delete: %q", sid, ks)
	}
}

func TestDeleteSession(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	// Ids that are prefixes of each other, on both sides of "abc".
	fillSession(t, l, activeHeader("ab"), 3, false)
	fillSession(t, l, activeHeader("abc"), 5, false)
	fillSession(t, l, activeHeader("abcd"), 4, false)
	fillSession(t, l, activeHeader("abc0"), 2, false)
	fillSession(t, l, activeHeader("claimed"), 2, true)

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
	if ok, err := l.DeleteSession(ctx, "claimed", func(Header) bool { return true }); ok || err != nil {
		t.Fatalf("DeleteSession(claimed) = %v, %v; want false, nil", ok, err)
	}
	checkIntact(t, l, "claimed", 2)

	// cond sees the current header and can refuse.
	var seen Header
	if ok, err := l.DeleteSession(ctx, "abcd", func(h Header) bool { seen = h; return false }); ok || err != nil {
		t.Fatalf("DeleteSession(abcd, false) = %v, %v; want false, nil", ok, err)
	}
	if seen.SessionID != "abcd" || seen.LastSeq != 4 {
		t.Fatalf("cond saw %+v", seen)
	}
	checkIntact(t, l, "abcd", 4)
	if ok, err := l.DeleteSession(ctx, "abcd", func(h Header) bool { return h.LastSeq == 4 }); !ok || err != nil {
		t.Fatalf("DeleteSession(abcd, true) = %v, %v", ok, err)
	}
	checkGone(t, l, "abcd")
	checkIntact(t, l, "ab", 3)
	checkIntact(t, l, "abc0", 2)

	// After its release the formerly claimed session can go.
	mustRelease(t, l, "claimed", 1)
	if ok, err := l.DeleteSession(ctx, "claimed", nil); !ok || err != nil {
		t.Fatalf("DeleteSession(claimed) after release = %v, %v", ok, err)
	}
	checkGone(t, l, "claimed")
	if st := l.Stats(); st.Deleted != 3 {
		t.Fatalf("Stats.Deleted = %d, want 3", st.Deleted)
	}

	// A deleted id can be created again, from scratch.
	h := mustCreate(t, l, activeHeader("abc"))
	if h.Epoch != 1 || h.LastSeq != 0 {
		t.Fatalf("re-created %+v", h)
	}
	if d := mustLoad(t, l, "abc"); d.Context != nil {
		t.Fatalf("re-created session has the old context %q", d.Context)
	}
	if _, ok, _ := l.SendSeq("abc", "send-1"); ok {
		t.Fatal("re-created session has an old send id")
	}
	mustAppend(t, l, batch(activeHeader("abc"), 1, 1, 1))
}

// A session whose header cannot be read is still deleted, whatever cond
// says (there is no header to ask it about), once it is not claimed.
func TestDeleteCorruptHeader(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	fillSession(t, l, activeHeader("bad"), 3, false)
	fillSession(t, l, activeHeader("good"), 1, false)
	l = rawEdit(t, l, dir, func(db *pebble.DB) { rawSet(t, db, headerKey("bad"), []byte{0xc1}) })
	ok, err := l.DeleteSession(context.Background(), "bad", func(Header) bool { return false })
	if !ok || err != nil {
		t.Fatalf("DeleteSession of a corrupt session = %v, %v", ok, err)
	}
	checkGone(t, l, "bad")
	checkIntact(t, l, "good", 1)
}

func TestDeletable(t *testing.T) {
	now := t0
	ret := time.Hour
	old, recent := now.Add(-2*ret), now.Add(-ret/2)
	cases := []struct {
		name string
		h    Header
		want bool
	}{
		{"completed old", Header{Status: StatusCompleted, LastActiveAt: old}, true},
		{"expired old", Header{Status: StatusExpired, LastActiveAt: old}, true},
		{"completed exactly retention", Header{Status: StatusCompleted, LastActiveAt: now.Add(-ret)}, true},
		{"completed just inside retention", Header{Status: StatusCompleted, LastActiveAt: now.Add(-ret + time.Nanosecond)}, false},
		{"completed recent", Header{Status: StatusCompleted, LastActiveAt: recent}, false},
		{"interrupted window over, old", Header{Status: StatusInterrupted, LastActiveAt: old, ExpiresAt: old.Add(5 * time.Minute)}, true},
		{"interrupted window ends now, old", Header{Status: StatusInterrupted, LastActiveAt: old, ExpiresAt: now}, true},
		{"interrupted window open, old", Header{Status: StatusInterrupted, LastActiveAt: old, ExpiresAt: now.Add(time.Second)}, false},
		{"interrupted window over, recent", Header{Status: StatusInterrupted, LastActiveAt: recent, ExpiresAt: now.Add(-time.Minute)}, false},
		{"interrupted without window", Header{Status: StatusInterrupted, LastActiveAt: old}, false},
		{"active old", Header{Status: StatusActive, LastActiveAt: old, ExpiresAt: old}, false},
	}
	for _, c := range cases {
		if got := Deletable(c.h, now, ret); got != c.want {
			t.Errorf("%s: Deletable = %v, want %v", c.name, got, c.want)
		}
	}
}

func hdr(sid string, st Status, lastActive, expires time.Duration) Header {
	h := activeHeader(sid)
	h.Status = st
	h.LastActiveAt = t0.Add(lastActive)
	if expires != 0 {
		h.InterruptedAt = h.LastActiveAt
		h.ExpiresAt = t0.Add(expires)
	}
	return h
}

func TestSweep(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	type sess struct {
		h       Header
		claimed bool
		gone1   bool // deleted by the sweep at t0
		gone2   bool // deleted by the sweep at t0+1h
	}
	h := time.Hour
	all := []sess{
		{h: hdr("completed-old", StatusCompleted, -2*h, 0), gone1: true},
		{h: hdr("expired-old", StatusExpired, -2*h, 0), gone1: true},
		{h: hdr("completed-at-retention", StatusCompleted, -h, 0), gone1: true},
		{h: hdr("interrupted-expired-old", StatusInterrupted, -2*h, -2*h+5*time.Minute), gone1: true},
		{h: hdr("completed-recent", StatusCompleted, -10*time.Minute, 0), gone2: true},
		{h: hdr("interrupted-expired-recent", StatusInterrupted, -10*time.Minute, -5*time.Minute), gone2: true},
		{h: hdr("interrupted-window-open", StatusInterrupted, -2*h, 30*time.Minute), gone2: true},
		{h: hdr("interrupted-no-window", StatusInterrupted, -2*h, 0)},
		{h: hdr("active-old", StatusActive, -5*h, 0)},
		{h: hdr("active-new", StatusActive, 0, 0)},
		{h: hdr("completed-claimed", StatusCompleted, -2*h, 0), claimed: true},
	}
	for _, s := range all {
		fillSession(t, l, s.h, 3, s.claimed)
	}
	check := func(round int) {
		t.Helper()
		for _, s := range all {
			if s.gone1 || (round >= 2 && s.gone2) {
				checkGone(t, l, s.h.SessionID)
			} else {
				checkIntact(t, l, s.h.SessionID, 3)
			}
		}
	}

	if n, err := l.Sweep(ctx, t0, h); err != nil || n != 4 {
		t.Fatalf("Sweep at t0 = %d, %v; want 4", n, err)
	}
	check(1)
	if n, err := l.Sweep(ctx, t0, h); err != nil || n != 0 {
		t.Fatalf("second Sweep at t0 = %d, %v; want 0", n, err)
	}
	if n, err := l.Sweep(ctx, t0.Add(h), h); err != nil || n != 3 {
		t.Fatalf("Sweep at t0+1h = %d, %v; want 3", n, err)
	}
	check(2)

	// Release the claimed one: now it goes.
	mustRelease(t, l, "completed-claimed", 1)
	if n, err := l.Sweep(ctx, t0.Add(h), h); err != nil || n != 1 {
		t.Fatalf("Sweep after release = %d, %v; want 1", n, err)
	}
	checkGone(t, l, "completed-claimed")
	if st := l.Stats(); st.Deleted != 8 {
		t.Fatalf("Stats.Deleted = %d, want 8", st.Deleted)
	}
}

// The sweep decides from a scan, but the committer checks again against
// the header as it is when the delete is applied: a session revived
// between the two is kept.
func TestSweepRechecksAtDelete(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	old := hdr("revived", StatusCompleted, -2*time.Hour, 0)
	fillSession(t, l, old, 1, true)

	release, _ := blockCommitter(t, l)
	// Queued first, applied first: the session comes back to life and its
	// owner lets go of it.
	revive := batch(old, 1, 2, 2)
	revive.Header.Status, revive.Header.LastActiveAt = StatusActive, t0
	ra := newAsync()
	if err := l.AppendAsync(ctx, ref(revive), ra.done); err != nil {
		t.Fatal(err)
	}
	rel := goCall(func() error { return l.Release(ctx, "revived", 1) })
	waitQueued(t, l, 2)
	// The sweep still sees the old header, and queues its delete behind.
	type sweepResult struct {
		n   int
		err error
	}
	sw := make(chan sweepResult, 1)
	go func() {
		n, err := l.Sweep(ctx, t0, time.Hour)
		sw <- sweepResult{n, err}
	}()
	waitQueued(t, l, 3)
	release()

	wantErr(t, "revive", ra.wait(t), nil)
	wantErr(t, "release", rel.wait(t), nil)
	r := <-sw
	if r.err != nil || r.n != 0 {
		t.Fatalf("Sweep = %d, %v; want the revived session kept", r.n, r.err)
	}
	if h := mustHeader(t, l, "revived"); h.Status != StatusActive || h.LastSeq != 2 {
		t.Fatalf("revived header %+v", h)
	}
}

// A session whose header cannot be read is deleted by the sweep once its
// newest readable entry is older than the retention, and kept until then.
func TestSweepCorruptHeaders(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	ctx := context.Background()
	timed := func(sid string, ago ...time.Duration) {
		mustCreate(t, l, activeHeader(sid))
		for i, a := range ago {
			seq := uint64(i + 1)
			b := batch(activeHeader(sid), 1, seq, seq)
			b.Entries[0].Time = float64(t0.Add(-a).UnixNano()) / 1e9
			mustAppend(t, l, b)
		}
	}
	timed("bad-old", 3*time.Hour, 2*time.Hour)
	timed("bad-new", 3*time.Hour, 10*time.Minute)
	timed("bad-new-tail", 3*time.Hour, 10*time.Minute, 0) // newest entry unreadable
	timed("good-old", 3*time.Hour)
	// Beyond January 2038 (int32 seconds) an entry still tells its time.
	y2040 := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	mustCreate(t, l, activeHeader("bad-2040"))
	b := batch(activeHeader("bad-2040"), 1, 1, 1)
	b.Entries[0].Time = float64(y2040.Unix())
	mustAppend(t, l, b)

	l = rawEdit(t, l, dir, func(db *pebble.DB) {
		for _, sid := range []string{"bad-old", "bad-new", "bad-new-tail", "bad-2040"} {
			rawSet(t, db, headerKey(sid), []byte("garbage"))
		}
		rawSet(t, db, entryKey("bad-new-tail", 3), []byte{0xc1})
	})
	if n, err := l.Sweep(ctx, t0, time.Hour); err != nil || n != 1 {
		t.Fatalf("Sweep at t0 = %d, %v; want 1 (bad-old)", n, err)
	}
	checkGone(t, l, "bad-old")
	for _, sid := range []string{"bad-new", "bad-new-tail", "bad-2040"} {
		if ks := keysOf(t, l, sid); len(ks) == 0 {
			t.Fatalf("%s deleted at t0: its newest entry is within the retention", sid)
		}
	}
	if es := readAll(t, l, "good-old"); len(es) != 1 || isUnreadable(es[0]) {
		t.Fatalf("good-old: %+v", es)
	}
	if st := l.Stats(); st.Corrupt < 4 {
		t.Fatalf("Stats.Corrupt = %d after a sweep met 4 bad headers", st.Corrupt)
	}

	if n, err := l.Sweep(ctx, t0.Add(time.Hour), time.Hour); err != nil || n != 2 {
		t.Fatalf("Sweep at t0+1h = %d, %v; want 2 (bad-new, bad-new-tail)", n, err)
	}
	checkGone(t, l, "bad-new")
	checkGone(t, l, "bad-new-tail")
	if n, err := l.Sweep(ctx, y2040.Add(10*time.Minute), time.Hour); err != nil || n != 0 {
		t.Fatalf("Sweep 10 min after the 2040 entry = %d, %v; want 0", n, err)
	}
	if n, err := l.Sweep(ctx, y2040.Add(time.Hour), time.Hour); err != nil || n != 1 {
		t.Fatalf("Sweep 1h after the 2040 entry = %d, %v; want 1", n, err)
	}
	checkGone(t, l, "bad-2040")
	// good-old is active: never swept.
	if es := readAll(t, l, "good-old"); len(es) != 1 || isUnreadable(es[0]) {
		t.Fatalf("good-old: %+v", es)
	}
}

func TestSweepCancelled(t *testing.T) {
	l := newTestLog(t)
	for i := range 3 {
		fillSession(t, l, hdr(fmt.Sprint("done-", i), StatusCompleted, -2*time.Hour, 0), 1, false)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Sweep(ctx, t0, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sweep with cancelled ctx: %v", err)
	}
	for i := range 3 {
		checkIntact(t, l, fmt.Sprint("done-", i), 1)
	}
}
