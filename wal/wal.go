package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FormatVersion is the Pebble on-disk format the log is opened with. It is
// pinned so that an upgrade of the library never silently rewrites the
// store into a format an older binary cannot read.
const FormatVersion = pebble.FormatValueSeparation

// Config configures a Log. The zero value of every field but Dir is usable.
type Config struct {
	// Dir is the Pebble directory; it is created if missing. Required.
	Dir string
	// NodeID is recorded as the owner of the sessions this log creates
	// and claims (Header.Owner); empty on a single node.
	NodeID string
	// MaxBatch caps how many queued write requests one fsync carries.
	// Default 512.
	MaxBatch int
	// OnCommit, if set, is called after every fsynced batch with the number
	// of requests and entries it carried (for metrics).
	OnCommit func(requests, entries int)
	// OnCorrupt, if set, is told of every stored record that could not be
	// read (for metrics); the log also logs it.
	OnCorrupt func(*CorruptError)
	// MemTableSize is the largest size of Pebble's memtable, in bytes.
	// Default 32 MiB (Pebble's own is 4 MiB). Keys of many sessions
	// interleave, so each small memtable flushed to L0 overlaps all of the
	// next level and its compaction rewrites that: under a steady load of
	// sends, 4 MiB cost a quarter more server CPU per ack. Larger is not
	// better either: every insert searches the memtable's skiplist, and
	// in interleaved runs 64 MiB cost 3-14% more CPU per ack than 32
	// (16 was no different). Pebble starts small and grows the memtable
	// up to this size, so a quiet log stays small.
	MemTableSize uint64
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 512
	}
	if c.MemTableSize == 0 {
		c.MemTableSize = 32 << 20
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
	Corrupt  uint64 // unreadable records met
}

// Log is the durable store. All its methods are safe for concurrent use.
type Log struct {
	cfg      Config
	db       *pebble.DB
	fsCloser io.Closer // stops the disk-health checks of db's FS
	reqs     chan *request
	// syncs carries applied groups to the sync loop; broken is set for
	// good by a failed commit.
	syncs  chan synced
	broken atomic.Pointer[error]

	// claims, scratch and staged are owned by the committer goroutine.
	claims  map[string]claim
	scratch kvScratch
	staged  map[string]*claim // the group's claim changes (commitGroup)
	// asyncReqs recycles AppendAsync's requests (recycle).
	asyncReqs sync.Pool

	stats struct{ syncs, requests, entries, deleted, corrupt atomic.Uint64 }

	// closedMu guards closed: reads and submissions hold it shared, so
	// Close (exclusive) never races a request into a stopped committer or
	// a read into a closed Pebble.
	closedMu sync.RWMutex
	closed   bool

	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type claim struct {
	epoch     uint64
	lastSeq   uint64
	owner     string
	lastEpoch uint64 // of the last entry
	// hdr is the header as last written, if this run wrote or read it
	// (settle.go): an append whose header it implies writes none.
	hdr *Header
}

// New opens (or creates) the log in cfg.Dir and starts its committer. A
// directory another process (or another Log of this process) holds open
// is refused with a clear error.
func New(cfg Config) (*Log, error) {
	cfg.setDefaults()
	if cfg.Dir == "" {
		return nil, errors.New("wal: Config.Dir is required")
	}
	// The disk-health checking FS Pebble would make by default is only
	// closed by DB.Close, so every failed Open (a directory in use) would
	// leak its goroutine; the log makes and closes its own.
	fs, fsCloser := vfs.WithDiskHealthChecks(vfs.Default, 5*time.Second, nil, func(info vfs.DiskSlowInfo) {
		cfg.Logger.Warn("wal: slow disk", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
	})
	db, err := pebble.Open(cfg.Dir, &pebble.Options{
		FS:                 fs,
		FormatMajorVersion: FormatVersion,
		Logger:             quietLogger{cfg.Logger},
		MemTableSize:       cfg.MemTableSize,
	})
	if err != nil {
		fsCloser.Close()
		if isLocked(err) {
			return nil, fmt.Errorf("wal: %s is in use by another process or another Log of this one (another tether serve?): %w", cfg.Dir, err)
		}
		return nil, fmt.Errorf("wal: open %s: %w", cfg.Dir, err)
	}
	l := &Log{
		cfg:      cfg,
		db:       db,
		fsCloser: fsCloser,
		reqs:     make(chan *request, cfg.MaxBatch),
		claims:   make(map[string]claim),
		staged:   make(map[string]*claim),
		stop:     make(chan struct{}),
	}
	l.asyncReqs.New = func() any { return new(request) }
	l.syncs = make(chan synced, 2)
	l.done.Add(2)
	go l.commitLoop()
	go l.syncLoop()
	return l, nil
}

// Close stops the committer and closes Pebble. Requests still queued fail
// with ErrClosed. It is safe to call more than once.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.closedMu.Lock()
		l.closed = true
		l.closedMu.Unlock()
		close(l.stop)
		l.done.Wait()
		l.closeErr = errors.Join(l.db.Close(), l.fsCloser.Close())
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
		Corrupt:  l.stats.corrupt.Load(),
	}
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

// corrupt records and logs an unreadable record.
func (l *Log) corrupt(err *CorruptError) {
	l.stats.corrupt.Add(1)
	l.cfg.Logger.Error("unreadable record in the log", "session", err.SessionID, "what", err.What, "seq", err.Seq, "err", err.Err)
	if l.cfg.OnCorrupt != nil {
		l.cfg.OnCorrupt(err)
	}
}

// Header reads a session's header without claiming it. It decodes nothing
// the client wrote, so it is how ownership is checked.
func (l *Log) Header(sid string) (Header, error) {
	if err := CheckID(sid); err != nil {
		return Header{}, err
	}
	if err := l.open(); err != nil {
		return Header{}, err
	}
	defer l.closedMu.RUnlock()
	h, err := getHeader(l.db, sid)
	var ce *CorruptError
	if errors.As(err, &ce) {
		l.corrupt(ce)
	}
	return h, err
}

// Load reads a session's header and context without claiming it. An
// unreadable context is reported (OnCorrupt) and returned as nil: the
// session stays reachable for its owner.
func (l *Log) Load(sid string) (SessionData, error) {
	h, err := l.Header(sid)
	if err != nil {
		return SessionData{}, err
	}
	if err := l.open(); err != nil {
		return SessionData{}, err
	}
	defer l.closedMu.RUnlock()
	c, err := getRaw(l.db, contextKey(sid))
	if err != nil {
		return SessionData{}, fmt.Errorf("wal: read context of %q: %w", sid, err)
	}
	return SessionData{Header: h, Context: c}, nil
}

// SendSeq returns the seq that a client send id became in the session, if
// that id was seen before.
func (l *Log) SendSeq(sid, id string) (uint64, bool, error) {
	if err := CheckID(sid); err != nil {
		return 0, false, err
	}
	if err := l.open(); err != nil {
		return 0, false, err
	}
	defer l.closedMu.RUnlock()
	v, err := getRaw(l.db, sendKey(sid, id))
	if err != nil {
		return 0, false, fmt.Errorf("wal: read send id of %q: %w", sid, err)
	}
	if v == nil {
		return 0, false, nil
	}
	if len(v) != 8 {
		ce := &CorruptError{SessionID: sid, What: "send id", Err: fmt.Errorf("send id %q: value of %d bytes", id, len(v))}
		l.corrupt(ce)
		return 0, false, ce
	}
	return beUint64(v), true, nil
}

// ScanSends calls fn with every send id of the session and its seq.
func (l *Log) ScanSends(sid string, fn func(id string, seq uint64)) error {
	if err := CheckID(sid); err != nil {
		return err
	}
	if err := l.open(); err != nil {
		return err
	}
	defer l.closedMu.RUnlock()
	lo := sessionPrefix(prefixSend, sid)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: sessionEnd(prefixSend, sid)})
	if err != nil {
		return fmt.Errorf("wal: scan send ids of %q: %w", sid, err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if v := it.Value(); len(v) == 8 {
			fn(string(it.Key()[len(lo):]), beUint64(v))
		}
	}
	return it.Error()
}

// ScanHeaders calls fn for every session's header, in session id order,
// until fn returns an error or ctx is done. An unreadable header is passed
// to onCorrupt (if non-nil) and skipped, so one bad session cannot stop a
// sweep or a recovery.
func (l *Log) ScanHeaders(ctx context.Context, fn func(Header) error, onCorrupt func(*CorruptError)) error {
	if err := l.open(); err != nil {
		return err
	}
	defer l.closedMu.RUnlock()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixHeader}, UpperBound: []byte{prefixHeader + 1}})
	if err != nil {
		return fmt.Errorf("wal: scan headers: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		sid := string(it.Key()[1:])
		h, err := decodeHeaderOf(sid, it.Value())
		if err == nil {
			if err := settle(l.db, &h); err != nil {
				return err
			}
		}
		if err != nil {
			var ce *CorruptError
			errors.As(err, &ce)
			l.corrupt(ce)
			if onCorrupt != nil {
				onCorrupt(ce)
			}
			continue
		}
		if err := fn(h); err != nil {
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
	v, err := getRaw(l.db, keyAlive)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("wal: read alive mark: %w", err)
	}
	if v == nil {
		return time.Time{}, false, nil
	}
	if len(v) != 8 {
		return time.Time{}, false, fmt.Errorf("%w: alive mark of %d bytes", ErrCorrupt, len(v))
	}
	return time.Unix(0, int64(beUint64(v))), true, nil
}

// getRaw returns a copy of key's value, or nil when it is not there.
func getRaw(r pebble.Reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// getHeader reads a header from the store, or from a batch that sees its
// own pending writes.
func getHeader(r pebble.Reader, sid string) (Header, error) {
	v, closer, err := r.Get(headerKey(sid))
	if errors.Is(err, pebble.ErrNotFound) {
		return Header{}, fmt.Errorf("%w: %q", ErrNotFound, sid)
	}
	if err != nil {
		return Header{}, fmt.Errorf("wal: read header of %q: %w", sid, err)
	}
	h, err := decodeHeaderOf(sid, v)
	closer.Close()
	if err != nil {
		return h, err
	}
	return h, settle(r, &h)
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
