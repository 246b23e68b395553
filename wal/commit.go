package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

type reqKind int

const (
	reqAppend reqKind = iota
	reqCreate
	reqClaim
	reqRelease
	reqDelete
	reqAlive
	reqFence
	reqCopy // last: TestOnlyWrites walks the kinds up to it
)

type request struct {
	kind  reqKind
	batch Batch
	sid   string
	owner string
	epoch uint64
	// settled is a claim's Header.Settled (ClaimAt).
	settled uint64
	at      time.Time
	// deleteIf is re-checked against the stored header by the committer.
	deleteIf func(Header) bool
	// copy and data are pointers: every append allocates a request, and
	// holding them by value made it 1 KiB.
	copy *Copy

	data    *SessionData // result of create/claim
	fenced  *Fenced      // result of a fence
	deleted bool
	err     error
	// Exactly one of done and callback is set: a waiting caller, or an
	// asynchronous one told from the sync loop.
	done     chan struct{}
	callback func(error)
}

// result is what a create or claim returned (zero after a failure).
func (r *request) result() SessionData {
	if r.data == nil {
		return SessionData{}
	}
	return *r.data
}

// Append stores b durably: it returns nil only after the entries and the
// header are fsynced. Concurrent Appends share one fsync.
func (l *Log) Append(ctx context.Context, b Batch) error {
	if err := CheckID(b.SessionID); err != nil {
		return err
	}
	_, err := l.submit(ctx, &request{kind: reqAppend, batch: b, sid: b.SessionID})
	return err
}

// AppendAsync queues a copy of *b and returns at once (b is not kept:
// the caller may reuse it); done is called exactly once,
// with nil only once b is durable. Appends of one session complete in the
// order they were queued, and once one fails every later one of that
// session fails too until it is claimed again (fail-stop). done runs on
// the log's sync loop: it must not block, as it holds up every later
// answer. AppendAsync itself waits only while the queue is full (or until
// ctx ends, when done is not called).
func (l *Log) AppendAsync(ctx context.Context, b *Batch, done func(error)) error {
	if err := CheckID(b.SessionID); err != nil {
		return err
	}
	if done == nil {
		// finish tells a request without callback by closing its done
		// channel; a nil one would panic on the sync loop.
		done = func(error) {}
	}
	r := l.asyncReqs.Get().(*request)
	r.kind, r.batch, r.sid, r.callback = reqAppend, *b, b.SessionID, done
	if err := l.enqueue(ctx, r); err != nil {
		l.recycle(r)
		return err
	}
	return nil
}

// recycle gives an AppendAsync request back once it is finished. Nothing
// holds one after its callback (a waiting caller's request is its own),
// and allocating one per append was a tenth of the server's garbage.
func (l *Log) recycle(r *request) {
	if r.kind == reqAppend && r.callback != nil {
		*r = request{} // drop the entries it held
		l.asyncReqs.Put(r)
	}
}

// Create stores a new session claimed with epoch 1 by this node
// (Config.NodeID), with its first context (nil: none). h's epoch, owner
// and last seq are the log's to set.
func (l *Log) Create(ctx context.Context, h Header, context []byte) (Header, error) {
	return l.CreateAt(ctx, h, context, 1)
}

// CreateAt is Create with the given epoch (a cluster's owner takes one
// derived from its configuration).
func (l *Log) CreateAt(ctx context.Context, h Header, context []byte, epoch uint64) (Header, error) {
	if err := CheckID(h.SessionID); err != nil {
		return Header{}, err
	}
	r, err := l.submit(ctx, &request{kind: reqCreate, sid: h.SessionID, owner: l.cfg.NodeID, epoch: epoch, batch: Batch{Header: h, Context: context}})
	return r.result().Header, err
}

// Claim makes this node the session's one writer: it bumps the owner
// epoch, stores it (with Config.NodeID as the owner), and from then on
// refuses appends with another epoch. It returns the session's header
// (with the new epoch) and context.
func (l *Log) Claim(ctx context.Context, sid string) (SessionData, error) {
	if err := CheckID(sid); err != nil {
		return SessionData{}, err
	}
	r, err := l.submit(ctx, &request{kind: reqClaim, sid: sid, owner: l.cfg.NodeID})
	return r.result(), err
}

// Release drops the claim made with epoch, if it is still the current one.
// Appends need a new Claim afterwards.
func (l *Log) Release(ctx context.Context, sid string, epoch uint64) error {
	_, err := l.submit(ctx, &request{kind: reqRelease, sid: sid, epoch: epoch})
	return err
}

// DeleteSession removes a session's entries, send ids, context and header
// in one atomic batch, unless the session is claimed or cond (if non-nil)
// is false for its header. A session whose header cannot be read is
// deleted whatever cond says (there is no header to ask it about): that
// is how the sweep and an operator get rid of it. It reports whether the
// session was deleted.
func (l *Log) DeleteSession(ctx context.Context, sid string, cond func(Header) bool) (bool, error) {
	if err := CheckID(sid); err != nil {
		return false, err
	}
	r, err := l.submit(ctx, &request{kind: reqDelete, sid: sid, deleteIf: cond})
	return r.deleted, err
}

// MarkAlive durably records t as a moment this node was running.
func (l *Log) MarkAlive(ctx context.Context, t time.Time) error {
	_, err := l.submit(ctx, &request{kind: reqAlive, at: t})
	return err
}

func (l *Log) submit(ctx context.Context, r *request) (*request, error) {
	r.done = make(chan struct{})
	if err := l.enqueue(ctx, r); err != nil {
		return r, err
	}
	// Once queued the request is committed or failed whatever ctx does:
	// waiting for it keeps "returned nil" equal to "durable".
	<-r.done
	return r, r.err
}

func (l *Log) enqueue(ctx context.Context, r *request) error {
	if err := l.open(); err != nil {
		return err
	}
	defer l.closedMu.RUnlock()
	select {
	case l.reqs <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *request) finish() {
	if r.callback != nil {
		r.callback(r.err)
		return
	}
	close(r.done)
}

func (l *Log) commitLoop() {
	defer l.done.Done()
	group := make([]*request, 0, l.cfg.MaxBatch)
	for {
		group = group[:0]
		// Stop wins over queued requests: select picks at random among
		// ready cases, and Close promises that what is still queued fails
		// with ErrClosed rather than being committed after it was called.
		select {
		case <-l.stop:
			l.failQueued()
			close(l.syncs)
			return
		default:
		}
		select {
		case r := <-l.reqs:
			group = append(group, r)
		case <-l.stop:
			l.failQueued()
			close(l.syncs)
			return
		}
	fill:
		for len(group) < l.cfg.MaxBatch {
			select {
			case r := <-l.reqs:
				group = append(group, r)
			default:
				break fill
			}
		}
		l.commitGroup(group)
	}
}

func (l *Log) failQueued() {
	for {
		select {
		case r := <-l.reqs:
			r.err = ErrClosed
			r.finish()
			l.recycle(r)
		default:
			return
		}
	}
}

// commitGroup applies every request of the group to one batch (indexed
// when later requests read what earlier ones wrote) and hands it to Pebble, which writes
// it to its WAL; the fsync is waited for by the sync loop, so the next
// group is applied while this one syncs (Pebble merges syncs that queue
// up). Claim changes are published at once — the next group's appends
// follow them — and a failed sync is fatal to the log.
func (l *Log) commitGroup(group []*request) {
	var b *pebble.Batch
	if onlyWrites(group) {
		b = l.db.NewBatch() // no index to keep up (1-2% of the server's CPU under load)
	} else {
		b = l.db.NewIndexedBatch()
	}
	staged := l.staged // reused: a group's claims are published below
	clear(staged)
	entries, needSync := 0, false
	broken := l.broken.Load()
	for _, r := range group {
		if broken != nil {
			r.err = *broken
			continue
		}
		r.err = l.apply(b, staged, r)
		if r.err == nil && r.kind == reqAppend {
			entries += len(r.batch.Entries)
		}
		if r.err == nil && (r.kind != reqAppend || !r.batch.NoSync) {
			needSync = true
		}
		if r.err != nil && r.kind == reqAppend {
			// Fail-stop: later appends of this claim in flight must not
			// land after one that did not. A newer claim is not touched.
			if c, ok := l.claimOf(staged, r.sid); ok && c.epoch == r.batch.Epoch {
				staged[r.sid] = nil
			}
		}
	}
	p := synced{group: append([]*request(nil), group...), b: b, entries: entries, empty: b.Empty(), noSync: !needSync}
	switch {
	case p.empty:
	case p.noSync:
		p.err = l.db.Apply(b, pebble.NoSync)
	default:
		p.err = l.db.ApplyNoSyncWait(b, pebble.Sync)
	}
	if p.err == nil {
		for sid, c := range staged {
			if c == nil {
				delete(l.claims, sid)
			} else {
				l.claims[sid] = *c
			}
		}
	} else {
		for _, r := range group {
			if c, ok := l.claims[r.sid]; ok && r.kind == reqAppend && c.epoch == r.batch.Epoch {
				delete(l.claims, r.sid)
			}
		}
	}
	l.syncs <- p
}

// onlyWrites says no request of the group reads its batch back (creates,
// claims, deletes and copies read the stored header, which an earlier
// request of the group may have just written), so it need not be indexed.
func onlyWrites(group []*request) bool {
	for _, r := range group {
		switch r.kind {
		case reqAppend, reqRelease, reqAlive:
		default:
			return false
		}
	}
	return true
}

// synced is a group whose batch Pebble took; the sync loop waits for its
// fsync (unless it needs none) and answers its requests, in order.
type synced struct {
	group   []*request
	b       *pebble.Batch
	entries int
	empty   bool
	noSync  bool // only NoSync appends: applied without an fsync
	err     error
}

func (l *Log) syncLoop() {
	defer l.done.Done()
	for p := range l.syncs {
		err := p.err
		if err == nil && !p.empty && !p.noSync {
			if err = p.b.SyncWait(); err == nil {
				l.stats.syncs.Add(1)
			}
		}
		_ = p.b.Close()
		if err != nil {
			l.cfg.Logger.Error("wal commit failed", "err", err, "requests", len(p.group))
			err = fmt.Errorf("wal: commit: %w", err)
			l.broken.CompareAndSwap(nil, &err)
		} else {
			l.stats.requests.Add(uint64(len(p.group)))
			l.stats.entries.Add(uint64(p.entries))
			if l.cfg.OnCommit != nil {
				l.cfg.OnCommit(len(p.group), p.entries)
			}
		}
		for _, r := range p.group {
			if err != nil && r.err == nil {
				r.err = err
				r.deleted = false
			}
			if r.kind == reqDelete && r.deleted && r.err == nil {
				l.stats.deleted.Add(1)
			}
			r.finish()
			l.recycle(r)
		}
	}
}

// claimOf reads the claim as the group has it so far.
func (l *Log) claimOf(staged map[string]*claim, sid string) (claim, bool) {
	if c, ok := staged[sid]; ok {
		if c == nil {
			return claim{}, false
		}
		return *c, true
	}
	c, ok := l.claims[sid]
	return c, ok
}

func (l *Log) apply(b *pebble.Batch, staged map[string]*claim, r *request) error {
	switch r.kind {
	case reqAppend:
		return l.applyAppend(b, staged, &r.batch)
	case reqCreate:
		return l.applyCreate(b, staged, r)
	case reqClaim:
		return l.applyClaim(b, staged, r)
	case reqRelease:
		if c, ok := l.claimOf(staged, r.sid); ok && c.epoch == r.epoch {
			staged[r.sid] = nil
		}
		return nil
	case reqDelete:
		return l.applyDelete(b, staged, r)
	case reqCopy:
		return l.applyCopy(b, staged, r)
	case reqFence:
		return l.applyFence(b, staged, r)
	case reqAlive:
		return b.Set(keyAlive, binary.BigEndian.AppendUint64(nil, uint64(r.at.UnixNano())), nil)
	}
	return fmt.Errorf("wal: unknown request kind %d", r.kind)
}

func (l *Log) applyCreate(b *pebble.Batch, staged map[string]*claim, r *request) error {
	h := r.batch.Header
	if _, err := getHeader(b, h.SessionID); !errors.Is(err, ErrNotFound) {
		if err == nil {
			err = fmt.Errorf("%w: %q", ErrExists, h.SessionID)
		}
		return err
	}
	h.Epoch, h.Owner, h.LastSeq = max(r.epoch, 1), r.owner, 0
	kv := &l.scratch
	kv.reset()
	if err := kv.header(h.SessionID, h); err != nil {
		return fmt.Errorf("wal: encode header of %q: %w", h.SessionID, err)
	}
	if r.batch.Context != nil {
		kv.rawSession(prefixContext, h.SessionID, r.batch.Context)
	}
	if err := kv.apply(b); err != nil {
		return err
	}
	r.data = &SessionData{Header: h, Context: r.batch.Context}
	staged[h.SessionID] = &claim{epoch: h.Epoch, owner: r.owner, hdr: &h}
	return nil
}

func (l *Log) applyClaim(b *pebble.Batch, staged map[string]*claim, r *request) error {
	h, err := getHeader(b, r.sid)
	if err != nil {
		return err
	}
	c, err := getRaw(b, contextKey(r.sid))
	if err != nil {
		return fmt.Errorf("wal: read context of %q: %w", r.sid, err)
	}
	switch {
	case r.epoch == 0:
		h.Epoch++
	case r.epoch < h.Epoch || r.epoch == h.Epoch && h.Owner != r.owner:
		// The same epoch is taken again only by the owner that fenced
		// the copies with it (see Fence).
		return fmt.Errorf("%w: %q is at epoch %d (owner %s), claim asks for %d", ErrStaleEpoch, r.sid, h.Epoch, h.Owner, r.epoch)
	default:
		h.Epoch = r.epoch
	}
	h.Settled = max(h.Settled, r.settled)
	h.Owner = r.owner
	kv := &l.scratch
	kv.reset()
	if err := kv.header(r.sid, h); err != nil {
		return fmt.Errorf("wal: encode header of %q: %w", r.sid, err)
	}
	if err := kv.apply(b); err != nil {
		return err
	}
	r.data = &SessionData{Header: h, Context: c}
	staged[r.sid] = &claim{epoch: h.Epoch, lastSeq: h.LastSeq, owner: r.owner, lastEpoch: h.LastEpoch, hdr: &h}
	return nil
}

func (l *Log) applyAppend(b *pebble.Batch, staged map[string]*claim, in *Batch) error {
	sid := in.SessionID
	c, ok := l.claimOf(staged, sid)
	switch {
	case !ok:
		return fmt.Errorf("%w: %q", ErrNotClaimed, sid)
	case in.Epoch != c.epoch:
		return fmt.Errorf("%w: %q has epoch %d, append carries %d", ErrStaleEpoch, sid, c.epoch, in.Epoch)
	}
	next := c.lastSeq
	for _, e := range in.Entries {
		if e.Seq != next+1 {
			return fmt.Errorf("%w: %q: got seq %d after %d", ErrSeqGap, sid, e.Seq, next)
		}
		next = e.Seq
	}
	if in.Header.LastSeq != next || in.Header.SessionID != sid {
		return fmt.Errorf("wal: %q: header says last seq %d of %q, entries end at %d",
			sid, in.Header.LastSeq, in.Header.SessionID, next)
	}
	// Encode everything before writing anything, so a request that fails
	// leaves nothing of itself in the group's batch.
	kv := &l.scratch
	kv.reset()
	for _, e := range in.Entries {
		e.Epoch = c.epoch
		if err := kv.entry(sid, e); err != nil {
			return fmt.Errorf("wal: encode entry %d of %q: %w", e.Seq, sid, err)
		}
	}
	for _, s := range in.Sends {
		kv.send(sid, s)
	}
	if len(in.Entries) > 0 {
		c.lastEpoch = c.epoch
	}
	h := in.Header
	h.Epoch, h.Owner, h.LastEpoch = c.epoch, c.owner, c.lastEpoch
	written := c.hdr
	if len(in.Entries) == 0 || written == nil || !impliedBy(*written, h, in.Entries[len(in.Entries)-1]) {
		if err := kv.header(sid, h); err != nil {
			return fmt.Errorf("wal: encode header of %q: %w", sid, err)
		}
		// A copy: taking h's address would move it to the heap on
		// every append, written or not.
		written = new(Header)
		*written = h
	}
	if in.Context != nil {
		kv.rawSession(prefixContext, sid, in.Context)
	}
	if err := kv.apply(b); err != nil {
		return err
	}
	staged[sid] = &claim{epoch: c.epoch, lastSeq: next, owner: c.owner, lastEpoch: c.lastEpoch, hdr: written}
	return nil
}

func (l *Log) applyDelete(b *pebble.Batch, staged map[string]*claim, r *request) error {
	if _, ok := l.claimOf(staged, r.sid); ok {
		return nil // a live owner is using it
	}
	h, err := getHeader(b, r.sid)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	// An unreadable header still lets a session be deleted: that is how
	// the sweep and an operator get rid of it.
	var ce *CorruptError
	if err != nil && !errors.As(err, &ce) {
		return err
	}
	if err == nil && r.deleteIf != nil && !r.deleteIf(h) {
		return nil
	}
	for _, p := range []byte{prefixEntry, prefixSend} {
		if err := b.DeleteRange(sessionPrefix(p, r.sid), sessionEnd(p, r.sid), nil); err != nil {
			return err
		}
	}
	for _, k := range [][]byte{headerKey(r.sid), contextKey(r.sid), fenceKey(r.sid)} {
		if err := b.Delete(k, nil); err != nil {
			return err
		}
	}
	r.deleted = true
	return nil
}

// isLocked reports whether Pebble refused a directory because another
// process holds its lock file.
func isLocked(err error) bool {
	// Pebble's lock is an fcntl lock (EAGAIN from another process) plus an
	// in-process table ("lock held by current process"). Matching any
	// message with "lock" in it would also match "block" and blame a
	// corrupt store on another process.
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) ||
		strings.Contains(err.Error(), "resource temporarily unavailable") || strings.Contains(err.Error(), "lock held by current process")
}
