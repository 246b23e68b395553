package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"
)

// raftStore is Raft's log and stable store on a Pebble of its own, in the
// node's data directory: Pebble is already this node's storage engine, so
// Raft's state needs no second one (raft-boltdb v2 would add bbolt). The
// Raft log holds only configuration changes, a few a day, so its store
// needs nothing clever; every write is synced.
type raftStore struct {
	db *pebble.DB
}

var (
	_ raft.LogStore    = (*raftStore)(nil)
	_ raft.StableStore = (*raftStore)(nil)
)

const (
	raftLogPrefix    = 'l'
	raftStablePrefix = 's'
)

func openRaftStore(dir string, log *slog.Logger) (*raftStore, error) {
	db, err := pebble.Open(dir, &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{log},
		MemTableSize:       4 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft store %s: %w", dir, err)
	}
	return &raftStore{db: db}, nil
}

func (s *raftStore) Close() error { return s.db.Close() }

func logKey(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte{raftLogPrefix}, i) }

func (s *raftStore) edge(last bool) (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{raftLogPrefix}, UpperBound: []byte{raftLogPrefix + 1}})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	ok := it.First()
	if last {
		ok = it.Last()
	}
	if !ok {
		return 0, it.Error()
	}
	return binary.BigEndian.Uint64(it.Key()[1:]), nil
}

// FirstIndex implements raft.LogStore.
func (s *raftStore) FirstIndex() (uint64, error) { return s.edge(false) }

// LastIndex implements raft.LogStore.
func (s *raftStore) LastIndex() (uint64, error) { return s.edge(true) }

// GetLog implements raft.LogStore.
func (s *raftStore) GetLog(index uint64, l *raft.Log) error {
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	return msgpack.Unmarshal(v, l)
}

// StoreLog implements raft.LogStore.
func (s *raftStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore.
func (s *raftStore) StoreLogs(logs []*raft.Log) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		v, err := msgpack.Marshal(l)
		if err != nil {
			return err
		}
		if err := b.Set(logKey(l.Index), v, nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

// DeleteRange implements raft.LogStore (min and max inclusive).
func (s *raftStore) DeleteRange(lo, hi uint64) error {
	return s.db.DeleteRange(logKey(lo), logKey(hi+1), pebble.Sync)
}

func stableKey(k []byte) []byte { return append([]byte{raftStablePrefix}, k...) }

// Set implements raft.StableStore.
func (s *raftStore) Set(k, v []byte) error { return s.db.Set(stableKey(k), v, pebble.Sync) }

// Get implements raft.StableStore: an empty value for a missing key.
func (s *raftStore) Get(k []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(k))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// SetUint64 implements raft.StableStore.
func (s *raftStore) SetUint64(k []byte, v uint64) error {
	return s.Set(k, binary.BigEndian.AppendUint64(nil, v))
}

// GetUint64 implements raft.StableStore: 0 for a missing key.
func (s *raftStore) GetUint64(k []byte) (uint64, error) {
	v, err := s.Get(k)
	if err != nil || len(v) == 0 {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("cluster: raft stable key %q holds %d bytes", k, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// pebbleLogger sends Pebble's log to slog at debug level (fatal at error).
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Debug(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Warn(fmt.Sprintf(format, args...), "component", "raft-store")
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "raft-store")
	panic(fmt.Sprintf(format, args...))
}
