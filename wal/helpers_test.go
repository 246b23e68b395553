package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ---- helpers shared by the tests and benchmarks of this package ----

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openLog opens a Log in dir with a silent logger; mod may change the
// config further. The log is closed at the end of the test.
func openLog(tb testing.TB, dir string, mod ...func(*Config)) *Log {
	tb.Helper()
	cfg := Config{Dir: dir, NodeID: "node-a", Logger: quiet}
	for _, f := range mod {
		f(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%s): %v", dir, err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

func newTestLog(tb testing.TB, mod ...func(*Config)) *Log {
	tb.Helper()
	return openLog(tb, tb.TempDir(), mod...)
}

var t0 = time.Unix(1_700_000_000, 0)

func entry(seq uint64) Entry {
	return Entry{
		Seq:     seq,
		Role:    []string{"user", "assistant", "tool"}[seq%3],
		Content: fmt.Sprintf("message %d", seq),
		Time:    float64(t0.Unix()) + float64(seq),
	}
}

func entries(from, to uint64) []Entry {
	var out []Entry
	for s := from; s <= to; s++ {
		out = append(out, entry(s))
	}
	return out
}

func activeHeader(sid string) Header {
	return Header{SessionID: sid, UserID: "u-" + sid, Status: StatusActive, CreatedAt: t0, LastActiveAt: t0}
}

// batch is an append of entries from..to (none when to < from) whose
// header is base with LastSeq set to match.
func batch(base Header, epoch, from, to uint64) Batch {
	h := base
	h.LastSeq = to
	if to < from {
		h.LastSeq = from - 1
	}
	return Batch{SessionID: base.SessionID, Epoch: epoch, Entries: entries(from, to), Header: h}
}

func mustCreate(tb testing.TB, l *Log, h Header) Header {
	tb.Helper()
	got, err := l.Create(context.Background(), h, nil)
	if err != nil {
		tb.Fatalf("Create(%q): %v", h.SessionID, err)
	}
	return got
}

func mustClaim(tb testing.TB, l *Log, sid string) SessionData {
	tb.Helper()
	d, err := l.Claim(context.Background(), sid)
	if err != nil {
		tb.Fatalf("Claim(%q): %v", sid, err)
	}
	return d
}

func mustRelease(tb testing.TB, l *Log, sid string, epoch uint64) {
	tb.Helper()
	if err := l.Release(context.Background(), sid, epoch); err != nil {
		tb.Fatalf("Release(%q, %d): %v", sid, epoch, err)
	}
}

func mustAppend(tb testing.TB, l *Log, b Batch) {
	tb.Helper()
	if err := l.Append(context.Background(), b); err != nil {
		tb.Fatalf("Append(%q, epoch %d, %d entries): %v", b.SessionID, b.Epoch, len(b.Entries), err)
	}
}

func mustHeader(tb testing.TB, l *Log, sid string) Header {
	tb.Helper()
	h, err := l.Header(sid)
	if err != nil {
		tb.Fatalf("Header(%q): %v", sid, err)
	}
	return h
}

func mustLoad(tb testing.TB, l *Log, sid string) SessionData {
	tb.Helper()
	d, err := l.Load(sid)
	if err != nil {
		tb.Fatalf("Load(%q): %v", sid, err)
	}
	return d
}

func mustRead(tb testing.TB, l *Log, sid string, lo, hi uint64, limit int, newest bool) []Entry {
	tb.Helper()
	es, err := l.Read(sid, lo, hi, limit, newest)
	if err != nil {
		tb.Fatalf("Read(%q, %d, %d, %d, %v): %v", sid, lo, hi, limit, newest, err)
	}
	return es
}

// readAll reads a session's whole log as its header bounds it.
func readAll(tb testing.TB, l *Log, sid string) []Entry {
	tb.Helper()
	h := mustHeader(tb, l, sid)
	return mustRead(tb, l, sid, 1, h.LastSeq+1, 1<<30, false)
}

func seqs(es []Entry) []uint64 {
	out := make([]uint64, 0, len(es))
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func span(from, to uint64) []uint64 {
	out := []uint64{}
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// checkEntries verifies that es are exactly want, with the content entry()
// gives them.
func checkEntries(tb testing.TB, what string, es []Entry, want []uint64) {
	tb.Helper()
	if got := seqs(es); !reflect.DeepEqual(got, want) {
		tb.Fatalf("%s: seqs %v, want %v", what, got, want)
	}
	for _, e := range es {
		w := entry(e.Seq)
		if e.Role != w.Role || e.Content != w.Content || e.Time != w.Time {
			tb.Fatalf("%s: entry %d = %+v, want %+v", what, e.Seq, e, w)
		}
	}
}

func isUnreadable(e Entry) bool {
	return e.Role == "system" && e.Metadata[Unreadable] == true
}

// rawEdit closes l, opens its directory with Pebble directly, lets edit
// write to it (garbage, holes), closes it and returns the log reopened
// with mod. Claims do not survive it, as after a restart.
func rawEdit(tb testing.TB, l *Log, dir string, edit func(db *pebble.DB), mod ...func(*Config)) *Log {
	tb.Helper()
	if err := l.Close(); err != nil {
		tb.Fatalf("Close: %v", err)
	}
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: FormatVersion, Logger: quietLogger{quiet}})
	if err != nil {
		tb.Fatalf("pebble.Open(%s): %v", dir, err)
	}
	edit(db)
	if err := db.Close(); err != nil {
		tb.Fatalf("pebble Close: %v", err)
	}
	return openLog(tb, dir, mod...)
}

func rawSet(tb testing.TB, db *pebble.DB, key, val []byte) {
	tb.Helper()
	if err := db.Set(key, val, pebble.Sync); err != nil {
		tb.Fatal(err)
	}
}

func rawDelete(tb testing.TB, db *pebble.DB, key []byte) {
	tb.Helper()
	if err := db.Delete(key, pebble.Sync); err != nil {
		tb.Fatal(err)
	}
}

// blockCommitter parks the committer goroutine so that what the test
// queues next waits in l.reqs and is committed as one group once the
// returned release is called. It needs no hook in the log: the sync loop
// runs AppendAsync's callbacks, so a callback that blocks parks it; the
// committer then hands it cap(l.syncs) more groups and blocks handing on
// the next one. The helper's own appends to a session of its own are
// those groups: NoSync header changes, readable as soon as they are
// applied, so it knows when each was taken. release waits for them to be
// answered; extra is how many requests of its own the log's Stats count
// after release. Release is also run at cleanup, so a failing test does
// not hang Close.
func blockCommitter(tb testing.TB, l *Log) (release func(), extra uint64) {
	tb.Helper()
	ctx := context.Background()
	h := activeHeader(fmt.Sprintf("gate-%d", time.Now().UnixNano()))
	if _, err := l.Create(ctx, h, nil); err != nil {
		tb.Fatal(err)
	}
	parked, gate := make(chan struct{}), make(chan struct{})
	if err := l.AppendAsync(ctx, ref(batch(h, 1, 1, 0)), func(error) {
		close(parked)
		<-gate
	}); err != nil {
		tb.Fatal(err)
	}
	<-parked
	fillers := cap(l.syncs) + 1
	answered := make(chan error, fillers)
	for i := 1; i <= fillers; i++ {
		b := batch(h, 1, 1, 0)
		b.Header.LastActiveAt = t0.Add(time.Duration(i) * time.Second)
		b.NoSync = true
		if err := l.AppendAsync(ctx, ref(b), func(err error) { answered <- err }); err != nil {
			tb.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for !mustHeader(tb, l, h.SessionID).LastActiveAt.Equal(b.Header.LastActiveAt) {
			if time.Now().After(deadline) {
				tb.Fatalf("the committer did not take the gate's append %d within 20s", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var rel sync.Once
	release = func() {
		rel.Do(func() {
			close(gate)
			for range fillers {
				if err := <-answered; err != nil {
					tb.Errorf("gate append: %v", err)
				}
			}
		})
	}
	tb.Cleanup(release)
	return release, uint64(fillers)
}

// waitQueued waits until n requests wait in the (blocked) committer's
// queue: how a test knows that a call made on another goroutine has
// taken its place in the order.
func waitQueued(tb testing.TB, l *Log, n int) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(l.reqs) < n {
		if time.Now().After(deadline) {
			tb.Fatalf("%d requests queued after 20s, want %d", len(l.reqs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// result collects the error of a call made on another goroutine.
type result chan error

func goCall(f func() error) result {
	r := make(result, 1)
	go func() { r <- f() }()
	return r
}

func (r result) wait(tb testing.TB) error {
	tb.Helper()
	select {
	case err := <-r:
		return err
	case <-time.After(30 * time.Second):
		tb.Fatal("call did not return within 30s")
		return nil
	}
}

// asyncResult records the callback of an AppendAsync and how often it
// ran.
type asyncResult struct {
	calls chan error
}

func newAsync() *asyncResult { return &asyncResult{calls: make(chan error, 4)} }

func (a *asyncResult) done(err error) { a.calls <- err }

// wait returns the callback's error; a second call shows up in none
// (the channel is buffered so that it never blocks the committer).
func (a *asyncResult) wait(tb testing.TB) error {
	tb.Helper()
	select {
	case err := <-a.calls:
		return err
	case <-time.After(30 * time.Second):
		tb.Fatal("AppendAsync callback not called within 30s")
		return nil
	}
}

// none checks that the callback did not run (again).
func (a *asyncResult) none(tb testing.TB, what string) {
	tb.Helper()
	select {
	case err := <-a.calls:
		tb.Fatalf("%s: callback called (again) with %v", what, err)
	default:
	}
}

// wantErr checks err against want: nil means success.
func wantErr(tb testing.TB, what string, err, want error) {
	tb.Helper()
	if want == nil {
		if err != nil {
			tb.Fatalf("%s: %v, want success", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		tb.Fatalf("%s: %v, want %v", what, err, want)
	}
}

// ref returns a pointer to a copy of v (AppendAsync takes its batch by
// pointer).
func ref[T any](v T) *T { return &v }
