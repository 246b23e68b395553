package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Batch is one atomic append to a session: its new entries (possibly
// none), the send ids they answer, and the session's new metadata.
type Batch struct {
	SessionID string
	// Epoch must be the epoch the session was claimed with.
	Epoch   uint64
	Entries []Entry
	// Sends maps client send ids to the seq of the entry they became.
	Sends map[string]uint64
	// Meta replaces the stored metadata; its LastSeq must equal the last
	// entry's seq (or the previous LastSeq when Entries is empty) and its
	// Epoch is set by the log.
	Meta Meta
}

type reqKind int

const (
	reqAppend reqKind = iota
	reqCreate
	reqClaim
	reqRelease
	reqDelete
	reqAlive
)

type request struct {
	kind  reqKind
	batch Batch
	sid   string
	epoch uint64
	at    time.Time
	// deleteIf is re-checked against the stored metadata by the committer.
	deleteIf func(Meta) bool

	meta    Meta // result of create/claim
	deleted bool
	err     error
	done    chan struct{}
}

// Append stores b durably: it returns nil only after the entries and the
// metadata are fsynced. Concurrent Appends share one fsync.
func (l *Log) Append(ctx context.Context, b Batch) error {
	if err := checkID(b.SessionID); err != nil {
		return err
	}
	_, err := l.submit(ctx, &request{kind: reqAppend, batch: b, sid: b.SessionID})
	return err
}

// Create stores a new session's metadata and claims it with epoch 1.
func (l *Log) Create(ctx context.Context, m Meta) (Meta, error) {
	if err := checkID(m.SessionID); err != nil {
		return Meta{}, err
	}
	r, err := l.submit(ctx, &request{kind: reqCreate, sid: m.SessionID, batch: Batch{Meta: m}})
	return r.meta, err
}

// Claim makes the caller the session's one writer: it bumps the owner
// epoch, stores it, and from then on refuses appends with an older epoch.
func (l *Log) Claim(ctx context.Context, sid string) (Meta, error) {
	if err := checkID(sid); err != nil {
		return Meta{}, err
	}
	r, err := l.submit(ctx, &request{kind: reqClaim, sid: sid})
	return r.meta, err
}

// Release drops the claim made with epoch, if it is still the current one.
// Appends need a new Claim afterwards.
func (l *Log) Release(ctx context.Context, sid string, epoch uint64) error {
	_, err := l.submit(ctx, &request{kind: reqRelease, sid: sid, epoch: epoch})
	return err
}

// DeleteSession removes a session's entries, send ids and metadata in one
// atomic batch, unless the session is claimed or cond (if non-nil) is false
// for its current metadata. It reports whether the session was deleted.
func (l *Log) DeleteSession(ctx context.Context, sid string, cond func(Meta) bool) (bool, error) {
	if err := checkID(sid); err != nil {
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
	if err := l.open(); err != nil {
		return r, err
	}
	select {
	case l.reqs <- r:
	case <-ctx.Done():
		l.closedMu.RUnlock()
		return r, ctx.Err()
	}
	l.closedMu.RUnlock()
	// Once queued the request is committed or failed whatever ctx does:
	// waiting for it keeps "returned nil" equal to "durable".
	<-r.done
	return r, r.err
}

func (l *Log) commitLoop() {
	defer l.done.Done()
	group := make([]*request, 0, l.cfg.MaxBatch)
	for {
		group = group[:0]
		select {
		case r := <-l.reqs:
			group = append(group, r)
		case <-l.stop:
			l.failQueued()
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
			close(r.done)
		default:
			return
		}
	}
}

// commitGroup applies every request of the group to one indexed batch (so
// later requests see earlier ones), commits it with one fsync, and only
// then publishes claim changes and wakes the callers.
func (l *Log) commitGroup(group []*request) {
	b := l.db.NewIndexedBatch()
	defer b.Close()
	staged := make(map[string]*claim)
	entries := 0
	for _, r := range group {
		r.err = l.apply(b, staged, r)
		if r.err == nil && r.kind == reqAppend {
			entries += len(r.batch.Entries)
		}
	}
	var err error
	if !b.Empty() {
		err = b.Commit(pebble.Sync)
		if err == nil {
			l.stats.syncs.Add(1)
		}
	}
	if err != nil {
		l.cfg.Logger.Error("wal commit failed", "err", err, "requests", len(group))
		err = fmt.Errorf("wal: commit: %w", err)
	} else {
		for sid, c := range staged {
			if c == nil {
				delete(l.claims, sid)
			} else {
				l.claims[sid] = *c
			}
		}
		l.stats.requests.Add(uint64(len(group)))
		l.stats.entries.Add(uint64(entries))
		if l.cfg.OnCommit != nil {
			l.cfg.OnCommit(len(group), entries)
		}
	}
	for _, r := range group {
		if err != nil && r.err == nil {
			r.err = err
			r.deleted = false
		}
		if r.kind == reqDelete && r.deleted && r.err == nil {
			l.stats.deleted.Add(1)
		}
		close(r.done)
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
		m := r.batch.Meta
		if _, err := getMeta(b, m.SessionID); !errors.Is(err, ErrNotFound) {
			if err == nil {
				err = fmt.Errorf("%w: %q", ErrExists, m.SessionID)
			}
			return err
		}
		m.Epoch, m.LastSeq = 1, 0
		r.meta = m
		staged[m.SessionID] = &claim{epoch: 1}
		return setValue(b, metaKey(m.SessionID), m)
	case reqClaim:
		m, err := getMeta(b, r.sid)
		if err != nil {
			return err
		}
		m.Epoch++
		r.meta = m
		staged[r.sid] = &claim{epoch: m.Epoch, lastSeq: m.LastSeq}
		return setValue(b, metaKey(r.sid), m)
	case reqRelease:
		if c, ok := l.claimOf(staged, r.sid); ok && c.epoch == r.epoch {
			staged[r.sid] = nil
		}
		return nil
	case reqDelete:
		return l.applyDelete(b, staged, r)
	case reqAlive:
		return b.Set(keyAlive, binary.BigEndian.AppendUint64(nil, uint64(r.at.UnixNano())), nil)
	}
	return fmt.Errorf("wal: unknown request kind %d", r.kind)
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
	if in.Meta.LastSeq != next || in.Meta.SessionID != sid {
		return fmt.Errorf("wal: %q: metadata says last seq %d of %q, entries end at %d",
			sid, in.Meta.LastSeq, in.Meta.SessionID, next)
	}
	// Encode everything before writing anything, so a request that fails
	// leaves nothing of itself in the group's batch.
	kvs := make([][2][]byte, 0, len(in.Entries)+len(in.Sends)+1)
	for _, e := range in.Entries {
		v, err := encode(e)
		if err != nil {
			return fmt.Errorf("wal: encode entry %d of %q: %w", e.Seq, sid, err)
		}
		kvs = append(kvs, [2][]byte{entryKey(sid, e.Seq), v})
	}
	for id, seq := range in.Sends {
		kvs = append(kvs, [2][]byte{sendKey(sid, id), binary.BigEndian.AppendUint64(nil, seq)})
	}
	m := in.Meta
	m.Epoch = c.epoch
	v, err := encode(m)
	if err != nil {
		return fmt.Errorf("wal: encode metadata of %q: %w", sid, err)
	}
	kvs = append(kvs, [2][]byte{metaKey(sid), v})
	for _, kv := range kvs {
		if err := b.Set(kv[0], kv[1], nil); err != nil {
			return err
		}
	}
	staged[sid] = &claim{epoch: c.epoch, lastSeq: next}
	return nil
}

func (l *Log) applyDelete(b *pebble.Batch, staged map[string]*claim, r *request) error {
	if _, ok := l.claimOf(staged, r.sid); ok {
		return nil // a live owner is using it
	}
	m, err := getMeta(b, r.sid)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	// Corrupt metadata still lets a session be deleted: that is how an
	// operator gets rid of it.
	var ce *CorruptError
	if err != nil && !errors.As(err, &ce) {
		return err
	}
	if err == nil && r.deleteIf != nil && !r.deleteIf(m) {
		return nil
	}
	for _, p := range []byte{prefixEntry, prefixSend} {
		if err := b.DeleteRange(sessionPrefix(p, r.sid), sessionEnd(p, r.sid), nil); err != nil {
			return err
		}
	}
	if err := b.Delete(metaKey(r.sid), nil); err != nil {
		return err
	}
	r.deleted = true
	return nil
}

// getMeta reads metadata from the store, or from a batch that sees its
// own pending writes.
func getMeta(r pebble.Reader, sid string) (Meta, error) {
	v, closer, err := r.Get(metaKey(sid))
	if errors.Is(err, pebble.ErrNotFound) {
		return Meta{}, fmt.Errorf("%w: %q", ErrNotFound, sid)
	}
	if err != nil {
		return Meta{}, fmt.Errorf("wal: read metadata of %q: %w", sid, err)
	}
	defer closer.Close()
	return decodeMeta(sid, v)
}

func setValue(b *pebble.Batch, key []byte, v any) error {
	val, err := encode(v)
	if err != nil {
		return fmt.Errorf("wal: encode %q: %w", key, err)
	}
	return b.Set(key, val, nil)
}

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }
