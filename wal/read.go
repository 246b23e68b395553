package wal

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tether-dev/tether/wal/record"
)

// Read returns the entries of sid with lo <= seq < hi, at most limit of
// them, taken from the low end or, with newest, from the high end; oldest
// first. The caller bounds hi by the session's last seq + 1 (it knows it:
// Read does no header lookup). Every seq of the range is returned: an
// entry that is missing or cannot be decoded comes back as a system entry
// saying so (Unreadable), is reported through OnCorrupt, and never makes
// the rest of the session unreadable.
func (l *Log) Read(sid string, lo, hi uint64, limit int, newest bool) ([]Entry, error) {
	var out []Entry
	err := l.scan(sid, lo, hi, limit, newest, func(n int) { out = make([]Entry, 0, n) }, func(seq uint64, val []byte, err error) {
		var e Entry
		if err == nil {
			e, err = decodeAt(sid, seq, val)
		}
		if err != nil {
			e = l.unreadable(sid, seq, err)
		}
		out = append(out, e)
	})
	return out, err
}

// ReadRaw is Read without decoding: the entries as stored, for a replay
// that sends them on as they are (record.ViewEntry reads them). Each is
// checked as Read checks it; what Read would replace with a stand-in
// comes back as the stand-in's bytes. The bytes are the caller's.
func (l *Log) ReadRaw(sid string, lo, hi uint64, limit int, newest bool) ([]RawEntry, error) {
	var out []RawEntry
	var chunk []byte // entries' bytes, many to an allocation, never moved
	n := 0
	err := l.scan(sid, lo, hi, limit, newest, func(count int) {
		out, n = make([]RawEntry, 0, count), count
	}, func(seq uint64, val []byte, err error) {
		if err == nil {
			if v, verr := record.ViewEntry(val); verr != nil || v.Seq != seq {
				_, err = decodeAt(sid, seq, val) // a form only the decoder reads, or wrong
			}
		}
		if err != nil {
			if val, err = EncodeEntry(l.unreadable(sid, seq, err)); err != nil {
				val = nil // cannot happen: the stand-in is plain
			}
		}
		if cap(chunk)-len(chunk) < len(val) {
			// Room for the rest if they are alike in size, up to a
			// chunk size past which one more allocation costs little.
			left := n - len(out)
			chunk = make([]byte, 0, max(len(val), min((len(val)+len(val)/4)*left, rawChunk)))
		}
		start := len(chunk)
		chunk = append(chunk, val...)
		out = append(out, RawEntry{Seq: seq, Bytes: chunk[start:len(chunk):len(chunk)]})
	})
	return out, err
}

// rawChunk is how many bytes ReadRaw allocates at a time at most (for
// entries smaller than it).
const rawChunk = 64 << 10

// scan calls each for every seq of the range Read describes, in order,
// with its stored bytes (valid only during the call), or an error when it
// is missing; first is told how many there will be.
func (l *Log) scan(sid string, lo, hi uint64, limit int, newest bool, first func(n int), each func(seq uint64, val []byte, err error)) error {
	if err := CheckID(sid); err != nil {
		return err
	}
	lo = max(lo, 1)
	if limit <= 0 || lo >= hi {
		return nil
	}
	if want := uint64(limit); hi-lo > want {
		if newest {
			lo = hi - want
		} else {
			hi = lo + want
		}
	}
	if err := l.open(); err != nil {
		return err
	}
	defer l.closedMu.RUnlock()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(sid, lo), UpperBound: entryKey(sid, hi)})
	if err != nil {
		return fmt.Errorf("wal: read %q: %w", sid, err)
	}
	defer it.Close()
	first(int(hi - lo))
	missing := errors.New("entry missing from the log")
	next := lo
	for ok := it.First(); ok; ok = it.Next() {
		seq := beUint64(it.Key()[len(it.Key())-8:])
		for ; next < seq; next++ {
			each(next, nil, missing)
		}
		each(seq, it.Value(), nil)
		next = seq + 1
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("wal: read %q: %w", sid, err)
	}
	for ; next < hi; next++ {
		each(next, nil, missing)
	}
	return nil
}

// Unreadable marks the stand-in for an entry the log could not read.
const Unreadable = "unreadable"

func (l *Log) unreadable(sid string, seq uint64, err error) Entry {
	l.corrupt(&CorruptError{SessionID: sid, Seq: seq, What: "entry", Err: err})
	return Entry{
		Seq: seq, Role: "system", Content: "[this entry could not be read from the log]",
		Metadata: map[string]any{Unreadable: true},
	}
}

func decodeAt(sid string, seq uint64, val []byte) (Entry, error) {
	e, err := DecodeEntry(val)
	if err != nil {
		return Entry{}, err
	}
	if e.Seq != seq {
		return Entry{}, fmt.Errorf("entry stored under seq %d says seq %d", seq, e.Seq)
	}
	return e, nil
}
