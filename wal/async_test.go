package wal

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
)

// ---- AppendAsync ----

// Many sessions queue appends without waiting; each callback runs once,
// in queue order per session, and nil means durable: everything is there
// after Close and a reopen.
func TestAppendAsyncOrderOnceDurable(t *testing.T) {
	const sessions, perSession = 16, 100
	dir := t.TempDir()
	l := openLog(t, dir)
	ctx := context.Background()

	var mu sync.Mutex
	got := map[string][]uint64{} // seqs in callback order
	calls := map[string]int{}    // callbacks per (sid, seq)
	var wg sync.WaitGroup
	wg.Add(sessions * perSession)
	errs := make(chan error, sessions*perSession)
	for i := range sessions {
		sid := fmt.Sprintf("as%02d", i)
		mustCreate(t, l, activeHeader(sid))
		go func() {
			for s := uint64(1); s <= perSession; s++ {
				b := batch(activeHeader(sid), 1, s, s)
				b.Sends = []Send{{ID: fmt.Sprint("send-", s), Seq: s}}
				err := l.AppendAsync(ctx, ref(b), func(err error) {
					mu.Lock()
					got[sid] = append(got[sid], s)
					calls[fmt.Sprint(sid, "/", s)]++
					mu.Unlock()
					if err != nil {
						errs <- fmt.Errorf("%s seq %d: %w", sid, s, err)
					}
					wg.Done()
				})
				if err != nil {
					errs <- fmt.Errorf("AppendAsync %s seq %d: %w", sid, s, err)
					for ; s <= perSession; s++ {
						wg.Done()
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Close has stopped the committer: no callback can run any more, so
	// the counts are final.
	mu.Lock()
	for i := range sessions {
		sid := fmt.Sprintf("as%02d", i)
		if fmt.Sprint(got[sid]) != fmt.Sprint(span(1, perSession)) {
			t.Fatalf("%s: callbacks in order %v", sid, got[sid])
		}
	}
	for k, n := range calls {
		if n != 1 {
			t.Fatalf("callback of %s ran %d times", k, n)
		}
	}
	mu.Unlock()

	l = openLog(t, dir)
	for i := range sessions {
		sid := fmt.Sprintf("as%02d", i)
		checkEntries(t, sid, readAll(t, l, sid), span(1, perSession))
		if seq, ok, err := l.SendSeq(sid, fmt.Sprint("send-", perSession)); !ok || err != nil || seq != perSession {
			t.Fatalf("%s: SendSeq = %d, %v, %v", sid, seq, ok, err)
		}
	}
}

// A nil callback is allowed: the append is fire-and-forget.
func TestAppendAsyncNilCallback(t *testing.T) {
	l := newTestLog(t)
	mustCreate(t, l, activeHeader("n"))
	if err := l.AppendAsync(context.Background(), ref(batch(activeHeader("n"), 1, 1, 1)), nil); err != nil {
		t.Fatal(err)
	}
	// A synchronous append queued behind it completes after it.
	mustAppend(t, l, batch(activeHeader("n"), 1, 2, 2))
	checkEntries(t, "n", readAll(t, l, "n"), span(1, 2))
}

// Fail-stop: once an append of a claim fails, the appends of that claim
// already in flight behind it fail too (here in the same group and in the
// next one), even those that would have fitted; a newer claim is not
// touched by the failures of an older one.
func TestAppendAsyncFailStop(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	a, b := activeHeader("a"), activeHeader("b")
	mustCreate(t, l, a)
	mustCreate(t, l, b)
	mustClaim(t, l, "b") // epoch 2

	release, _ := blockCommitter(t, l)
	type call struct {
		name string
		b    Batch
		want error
		res  *asyncResult
	}
	calls := []call{
		{name: "a 1..2", b: batch(a, 1, 1, 2)},
		{name: "a 4 (gap)", b: batch(a, 1, 4, 4), want: ErrSeqGap},
		{name: "a 3 (would fit)", b: batch(a, 1, 3, 3), want: ErrNotClaimed},
		{name: "a 3..4 (would fit)", b: batch(a, 1, 3, 4), want: ErrNotClaimed},
		{name: "b 1 with the old epoch", b: batch(b, 1, 1, 1), want: ErrStaleEpoch},
		{name: "b 1 with the new epoch", b: batch(b, 2, 1, 1)},
		{name: "b 2..3", b: batch(b, 2, 2, 3)},
	}
	for i := range calls {
		calls[i].res = newAsync()
		if err := l.AppendAsync(ctx, ref(calls[i].b), calls[i].res.done); err != nil {
			t.Fatalf("%s: AppendAsync: %v", calls[i].name, err)
		}
	}
	release()
	for _, c := range calls {
		wantErr(t, c.name, c.res.wait(t), c.want)
	}
	// In a later group, the failed claim is still gone.
	wantErr(t, "a 3 later", l.Append(ctx, batch(a, 1, 3, 3)), ErrNotClaimed)
	mustAppend(t, l, batch(b, 2, 4, 4))

	checkEntries(t, "a", readAll(t, l, "a"), span(1, 2))
	checkEntries(t, "b", readAll(t, l, "b"), span(1, 4))
	// A new Claim starts over where the durable log ends.
	d := mustClaim(t, l, "a")
	if d.Header.Epoch != 2 || d.Header.LastSeq != 2 {
		t.Fatalf("Claim after fail-stop = %+v", d.Header)
	}
	mustAppend(t, l, batch(a, 2, 3, 4))
	checkEntries(t, "a", readAll(t, l, "a"), span(1, 4))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		c.res.none(t, c.name)
	}
}

// A failing request leaves nothing of itself in its group: here the
// second of its entries cannot be encoded, after the first one could. The
// others of the group commit, with one fsync.
func TestFailedRequestLeavesNothing(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	for _, sid := range []string{"x", "y", "z"} {
		if _, err := l.Create(ctx, activeHeader(sid), []byte("ctx-"+sid)); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(t, l, batch(activeHeader("y"), 1, 1, 1))
	wantY := mustLoad(t, l, "y")

	release, extra := blockCommitter(t, l)
	before := l.Stats()
	good := func(sid string) Batch {
		b := batch(activeHeader(sid), 1, 1, 2)
		b.Sends = []Send{{ID: "s-" + sid, Seq: 2}}
		b.Context = []byte("new-" + sid)
		return b
	}
	bad := batch(activeHeader("y"), 1, 2, 3)
	bad.Entries[1].Metadata = map[string]any{"ch": make(chan int)} // msgpack cannot encode it
	bad.Sends = []Send{{ID: "s-y", Seq: 3}}
	bad.Context = []byte("new-y")
	bad.Header.Status = StatusCompleted
	rx, ry, rz := newAsync(), newAsync(), newAsync()
	for _, c := range []struct {
		b Batch
		r *asyncResult
	}{{good("x"), rx}, {bad, ry}, {good("z"), rz}} {
		if err := l.AppendAsync(ctx, ref(c.b), c.r.done); err != nil {
			t.Fatal(err)
		}
	}
	release()
	wantErr(t, "x", rx.wait(t), nil)
	if err := ry.wait(t); err == nil {
		t.Fatal("append with an unencodable entry succeeded")
	}
	wantErr(t, "z", rz.wait(t), nil)

	after := l.Stats()
	if after.Syncs-before.Syncs != 1 || after.Requests-before.Requests-extra != 3 || after.Entries-before.Entries != 4 {
		t.Fatalf("stats before %+v after %+v: want 1 fsync for 3 requests and 4 entries", before, after)
	}
	for _, sid := range []string{"x", "z"} {
		checkEntries(t, sid, readAll(t, l, sid), span(1, 2))
		if d := mustLoad(t, l, sid); string(d.Context) != "new-"+sid {
			t.Fatalf("%s context %q", sid, d.Context)
		}
		if seq, ok, err := l.SendSeq(sid, "s-"+sid); !ok || err != nil || seq != 2 {
			t.Fatalf("%s SendSeq = %d, %v, %v", sid, seq, ok, err)
		}
	}
	if d := mustLoad(t, l, "y"); !reflect.DeepEqual(d, wantY) {
		t.Fatalf("the failed request changed y:\n got %+v\nwant %+v", d, wantY)
	}
	es := mustRead(t, l, "y", 1, 4, 10, false)
	if len(es) != 3 || isUnreadable(es[0]) || !isUnreadable(es[1]) || !isUnreadable(es[2]) {
		t.Fatalf("y entries %+v: want 1 and nothing stored at 2 and 3", es)
	}
	if _, ok, err := l.SendSeq("y", "s-y"); ok || err != nil {
		t.Fatalf("the failed request stored its send id (ok=%v err=%v)", ok, err)
	}
}

// What one group does with a mix of requests: each is applied in order
// and sees the ones before it, failures and fail-stop are per claim, and
// the group ends with one fsync and the claims it left published.
func TestCommitGroupMixed(t *testing.T) {
	l := newTestLog(t)
	ctx := context.Background()
	x, y, z := activeHeader("x"), activeHeader("y"), activeHeader("z")
	mustCreate(t, l, x)
	mustCreate(t, l, y)
	mustAppend(t, l, batch(y, 1, 1, 2))
	mustRelease(t, l, "y", 1)

	release, extra := blockCommitter(t, l)
	before := l.Stats()
	var results []func() error
	async := func(b Batch) {
		r := newAsync()
		if err := l.AppendAsync(ctx, ref(b), r.done); err != nil {
			t.Fatal(err)
		}
		results = append(results, func() error { return r.wait(t) })
	}
	// sync runs a synchronous call on its own goroutine and waits until it
	// is queued, so the queue order is the order of this list.
	queueSync := func(f func() error) {
		n := len(l.reqs)
		r := goCall(f)
		waitQueued(t, l, n+1)
		results = append(results, func() error { return r.wait(t) })
	}
	var claimX SessionData
	var deleted bool
	async(batch(x, 1, 1, 2))                                                                    // 0 ok
	async(batch(x, 1, 5, 5))                                                                    // 1 gap: drops claim 1 of x
	async(batch(x, 1, 3, 4))                                                                    // 2 fail-stop
	queueSync(func() error { _, err := l.Create(ctx, z, nil); return err })                     // 3 ok
	async(batch(z, 1, 1, 1))                                                                    // 4 sees the staged claim
	queueSync(func() error { _, err := l.Create(ctx, z, nil); return err })                     // 5 sees the staged header
	queueSync(func() (err error) { claimX, err = l.Claim(ctx, "x"); return err })               // 6 epoch 2, last seq 2
	async(batch(x, 1, 3, 3))                                                                    // 7 stale now
	async(batch(x, 2, 3, 3))                                                                    // 8 ok
	queueSync(func() (err error) { deleted, err = l.DeleteSession(ctx, "y", nil); return err }) // 9
	queueSync(func() error { _, err := l.Claim(ctx, "y"); return err })                         // 10 deleted earlier in the group
	release()

	want := []error{nil, ErrSeqGap, ErrNotClaimed, nil, nil, ErrExists, nil, ErrStaleEpoch, nil, nil, ErrNotFound}
	for i, r := range results {
		wantErr(t, fmt.Sprint("request ", i), r(), want[i])
	}
	if claimX.Header.Epoch != 2 || claimX.Header.LastSeq != 2 {
		t.Fatalf("claim in group saw %+v", claimX.Header)
	}
	if !deleted {
		t.Fatal("delete in group did not delete")
	}
	after := l.Stats()
	if after.Syncs-before.Syncs != 1 || after.Requests-before.Requests-extra != uint64(len(want)) ||
		after.Entries-before.Entries != 4 || after.Deleted-before.Deleted != 1 {
		t.Fatalf("stats delta: before %+v after %+v", before, after)
	}
	checkEntries(t, "x", readAll(t, l, "x"), span(1, 3))
	if h := mustHeader(t, l, "x"); h.Epoch != 2 || h.LastSeq != 3 {
		t.Fatalf("x header %+v", h)
	}
	checkEntries(t, "z", readAll(t, l, "z"), span(1, 1))
	if _, err := l.Header("y"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("y: %v", err)
	}
	// The published claims are the ones the group ended with.
	mustAppend(t, l, batch(x, 2, 4, 4))
	mustAppend(t, l, batch(z, 1, 2, 2))
}

// With AppendAsync the caller waits only while the queue is full; a ctx
// that ends then makes AppendAsync return its error, and the callback is
// never called.
func TestAppendAsyncCancelledWhileQueueFull(t *testing.T) {
	l := newTestLog(t, func(c *Config) { c.MaxBatch = 1 }) // a queue of one
	ctx := context.Background()
	mustCreate(t, l, activeHeader("q"))
	release, _ := blockCommitter(t, l)
	queued := newAsync()
	if err := l.AppendAsync(ctx, ref(batch(activeHeader("q"), 1, 1, 1)), queued.done); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, l, 1)

	// Already cancelled: the queue is full, so only ctx is ready.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	early := newAsync()
	wantErr(t, "AppendAsync with a done ctx", l.AppendAsync(cctx, ref(batch(activeHeader("q"), 1, 2, 2)), early.done), context.Canceled)
	// Cancelled while it waits.
	cctx, cancel = context.WithCancel(ctx)
	late := newAsync()
	r := goCall(func() error { return l.AppendAsync(cctx, ref(batch(activeHeader("q"), 1, 2, 2)), late.done) })
	cancel()
	wantErr(t, "AppendAsync cancelled while waiting", r.wait(t), context.Canceled)
	// The same for a synchronous Append.
	cctx, cancel = context.WithCancel(ctx)
	r = goCall(func() error { return l.Append(cctx, batch(activeHeader("q"), 1, 2, 2)) })
	cancel()
	wantErr(t, "Append cancelled while waiting", r.wait(t), context.Canceled)

	release()
	wantErr(t, "queued append", queued.wait(t), nil)
	mustAppend(t, l, batch(activeHeader("q"), 1, 2, 2))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	early.none(t, "cancelled before queueing")
	late.none(t, "cancelled while waiting")
	queued.none(t, "queued append")
}
