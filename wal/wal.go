package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// FormatVersion is the Pebble on-disk format the log is opened with. It is
// pinned so that an upgrade of the library never silently rewrites the
// store into a format an older binary cannot read.
const FormatVersion = pebble.FormatValueSeparation

// Config configures a Log. The zero value of every field but Dir is usable.
type Config struct {
	// Dir is the Pebble directory; it is created if missing. Required.
	Dir string
	// MaxBatch caps how many queued write requests one fsync carries.
	// Default 256.
	MaxBatch int
	// Retention is how long expired and completed sessions are kept after
	// their last activity before the sweeper deletes them. Default 1h.
	Retention time.Duration
	// SweepInterval is how often the background sweeper runs; negative
	// disables it (tests call Sweep directly). Default: a quarter of the
	// retention, between 100ms and 1m, so a session is gone soon after
	// its retention ends.
	SweepInterval time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// OnCommit, if set, is called after every fsynced batch with the number
	// of requests and entries it carried (for metrics).
	OnCommit func(requests, entries int)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.Retention <= 0 {
		c.Retention = time.Hour
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = min(max(c.Retention/4, 100*time.Millisecond), time.Minute)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Stats are running totals since the log was opened.
type Stats struct {
	Syncs    uint64 // fsynced Pebble commits
	Requests uint64 // write requests they carried
	Entries  uint64 // entries appended
	Deleted  uint64 // sessions deleted
}

// Log is the durable store. All its methods are safe for concurrent use.
type Log struct {
	cfg  Config
	db   *pebble.DB
	reqs chan *request

	// claims is owned by the committer goroutine.
	claims map[string]claim

	stats struct{ syncs, requests, entries, deleted atomic.Uint64 }

	// closedMu guards closed: reads and submissions hold it shared, so
	// Close (exclusive) never races a request into a stopped committer or
	// a read into a closed Pebble.
	closedMu sync.RWMutex
	closed   bool

	// ctx is cancelled by Close, stopping a sweep in progress.
	ctx       context.Context
	cancel    context.CancelFunc
	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type claim struct {
	epoch   uint64
	lastSeq uint64
}

// New opens (or creates) the log in cfg.Dir and starts its committer and,
// unless disabled, its retention sweeper.
func New(cfg Config) (*Log, error) {
	cfg.setDefaults()
	if cfg.Dir == "" {
		return nil, errors.New("wal: Config.Dir is required")
	}
	db, err := pebble.Open(cfg.Dir, &pebble.Options{
		FormatMajorVersion: FormatVersion,
		Logger:             quietLogger{cfg.Logger},
	})
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", cfg.Dir, err)
	}
	l := &Log{
		cfg:    cfg,
		db:     db,
		reqs:   make(chan *request, cfg.MaxBatch),
		claims: make(map[string]claim),
		stop:   make(chan struct{}),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.done.Add(1)
	go l.commitLoop()
	if cfg.SweepInterval > 0 {
		l.done.Add(1)
		go l.sweepLoop()
	}
	return l, nil
}

// Close stops the committer and sweeper and closes Pebble. Requests still
// queued fail with ErrClosed. It is safe to call more than once.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.closedMu.Lock()
		l.closed = true
		l.closedMu.Unlock()
		close(l.stop)
		l.cancel()
		l.done.Wait()
		l.closeErr = l.db.Close()
	})
	return l.closeErr
}

// Stats returns running totals.
func (l *Log) Stats() Stats {
	return Stats{
		Syncs:    l.stats.syncs.Load(),
		Requests: l.stats.requests.Load(),
		Entries:  l.stats.entries.Load(),
		Deleted:  l.stats.deleted.Load(),
	}
}

// Meta reads a session's metadata without claiming it.
func (l *Log) Meta(sid string) (Meta, error) {
	if err := checkID(sid); err != nil {
		return Meta{}, err
	}
	return l.readMeta(sid)
}

// open takes the shared close lock; it fails once the log is closed.
// Callers defer l.closedMu.RUnlock() when it succeeds.
func (l *Log) open() error {
	l.closedMu.RLock()
	if l.closed {
		l.closedMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (l *Log) readMeta(sid string) (Meta, error) {
	if err := l.open(); err != nil {
		return Meta{}, err
	}
	defer l.closedMu.RUnlock()
	return getMeta(l.db, sid)
}

// SendSeq returns the seq that a client send id became in the session, if
// that id was seen before.
func (l *Log) SendSeq(sid, id string) (uint64, bool, error) {
	if err := checkID(sid); err != nil {
		return 0, false, err
	}
	if err := l.open(); err != nil {
		return 0, false, err
	}
	defer l.closedMu.RUnlock()
	v, closer, err := l.db.Get(sendKey(sid, id))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("wal: read send id of %q: %w", sid, err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false, &CorruptError{SessionID: sid, Err: fmt.Errorf("send id %q: value of %d bytes", id, len(v))}
	}
	return beUint64(v), true, nil
}

// ReadAfter returns up to limit entries with seq > after, oldest first.
func (l *Log) ReadAfter(sid string, after uint64, limit int) ([]Entry, error) {
	if after == ^uint64(0) {
		return nil, checkID(sid)
	}
	return l.readRange(sid, after+1, ^uint64(0), limit, false)
}

// ReadBefore returns the up to limit newest entries with seq < before,
// oldest first. before 0 means "the end of the log".
func (l *Log) ReadBefore(sid string, before uint64, limit int) ([]Entry, error) {
	if before == 0 {
		before = ^uint64(0)
	}
	return l.readRange(sid, 1, before, limit, true)
}

// readRange reads entries with lo <= seq < hi, taking limit from the low
// end, or from the high end when newest is set. Only the returned keys are
// read (plus the session's metadata, for its last seq). Every seq in the
// range up to the last one must be there: a hole anywhere in what is
// asked for, edges included, is reported as corruption.
func (l *Log) readRange(sid string, lo, hi uint64, limit int, newest bool) ([]Entry, error) {
	if err := checkID(sid); err != nil {
		return nil, err
	}
	m, err := l.readMeta(sid)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	hi = min(hi, m.LastSeq+1)
	if limit <= 0 || lo >= hi {
		return nil, nil
	}
	want := min(uint64(limit), hi-lo)
	if newest {
		lo = hi - want
	} else {
		hi = lo + want
	}
	if err := l.open(); err != nil {
		return nil, err
	}
	defer l.closedMu.RUnlock()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(sid, lo), UpperBound: entryKey(sid, hi)})
	if err != nil {
		return nil, fmt.Errorf("wal: read %q: %w", sid, err)
	}
	defer it.Close()
	out := make([]Entry, 0, want)
	for ok := it.First(); ok; ok = it.Next() {
		e, err := decodeAt(sid, it.Key(), it.Value())
		if err != nil {
			return nil, err
		}
		if next := lo + uint64(len(out)); e.Seq != next {
			return nil, &CorruptError{SessionID: sid, Seq: next, Err: errors.New("entry missing from the log")}
		}
		out = append(out, e)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("wal: read %q: %w", sid, err)
	}
	if n := uint64(len(out)); n != want {
		return nil, &CorruptError{SessionID: sid, Seq: lo + n, Err: errors.New("entry missing from the log")}
	}
	return out, nil
}

func decodeAt(sid string, key, val []byte) (Entry, error) {
	seq := beUint64(key[len(key)-8:])
	e, err := DecodeEntry(val)
	if err != nil {
		return Entry{}, &CorruptError{SessionID: sid, Seq: seq, Err: err}
	}
	if e.Seq != seq {
		return Entry{}, &CorruptError{SessionID: sid, Seq: seq, Err: fmt.Errorf("entry stored under seq %d says seq %d", seq, e.Seq)}
	}
	return e, nil
}

// ScanMeta calls fn for every session's metadata, in session id order,
// until fn returns an error or ctx is done. Undecodable metadata is passed
// to onCorrupt (if non-nil) and skipped, so one bad session cannot stop a
// sweep or a recovery.
func (l *Log) ScanMeta(ctx context.Context, fn func(Meta) error, onCorrupt func(error)) error {
	if err := l.open(); err != nil {
		return err
	}
	defer l.closedMu.RUnlock()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixMeta}, UpperBound: []byte{prefixMeta + 1}})
	if err != nil {
		return fmt.Errorf("wal: scan metadata: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		sid := string(it.Key()[1:])
		m, err := decodeMeta(sid, it.Value())
		if err != nil {
			if onCorrupt != nil {
				onCorrupt(err)
			}
			continue
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return it.Error()
}

// LastAlive returns the last time recorded by MarkAlive, if any.
func (l *Log) LastAlive() (time.Time, bool, error) {
	if err := l.open(); err != nil {
		return time.Time{}, false, err
	}
	defer l.closedMu.RUnlock()
	v, closer, err := l.db.Get(keyAlive)
	if errors.Is(err, pebble.ErrNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("wal: read alive mark: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return time.Time{}, false, fmt.Errorf("%w: alive mark of %d bytes", ErrCorrupt, len(v))
	}
	return time.Unix(0, int64(beUint64(v))), true, nil
}

type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Infof(format string, args ...any) {
	q.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}
func (q quietLogger) Errorf(format string, args ...any) {
	q.l.Error("pebble: " + fmt.Sprintf(format, args...))
}
func (q quietLogger) Fatalf(format string, args ...any) {
	q.l.Error("pebble fatal: " + fmt.Sprintf(format, args...))
	panic(fmt.Sprintf(format, args...))
}
