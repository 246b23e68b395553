package wal

import (
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
	"github.com/vmihailenco/msgpack/v5"
)

// kvScratch gathers one request's keys and values before any of them goes
// into the group's batch (a request that fails must leave nothing of
// itself there). They are encoded into one buffer that the committer
// reuses from request to request: Pebble copies what it is given, and
// encoding each key and value into its own allocation cost a kilobyte of
// garbage per append. Committer goroutine only.
type kvScratch struct {
	buf []byte
	kvs [][3]int // key start, value start (= key end), value end
	enc *msgpack.Encoder
	// hdr is the header being encoded: encoding a local would move it to
	// the heap.
	hdr Header
}

func (s *kvScratch) reset() {
	s.buf, s.kvs = s.buf[:0], s.kvs[:0]
	if s.enc == nil {
		s.enc = msgpack.NewEncoder(s)
	}
}

// Write, WriteByte and WriteString let the encoder append to buf.
func (s *kvScratch) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	return len(p), nil
}

func (s *kvScratch) WriteByte(c byte) error {
	s.buf = append(s.buf, c)
	return nil
}

func (s *kvScratch) WriteString(p string) (int, error) {
	s.buf = append(s.buf, p...)
	return len(p), nil
}

// sessionKey starts a pair with a key sid's keys under prefix p begin
// with; the caller appends the rest of the key to s.buf.
func (s *kvScratch) sessionKey(p byte, sid string) {
	s.kvs = append(s.kvs, [3]int{len(s.buf)})
	s.buf = append(append(append(s.buf, p), sid...), 0)
}

// entry adds e under its entry key.
func (s *kvScratch) entry(sid string, e Entry) error {
	s.sessionKey(prefixEntry, sid)
	s.buf = binary.BigEndian.AppendUint64(s.buf, e.Seq)
	s.startValue()
	if err := e.EncodeMsgpack(s.enc); err != nil {
		return err
	}
	s.endValue()
	return nil
}

// send adds a send id's seq under its send key.
func (s *kvScratch) send(sid string, snd Send) {
	s.sessionKey(prefixSend, sid)
	s.buf = append(s.buf, snd.ID...)
	s.raw(binary.BigEndian.AppendUint64(nil, snd.Seq))
}

// header adds h under sid's header key.
func (s *kvScratch) header(sid string, h Header) error {
	s.kvs = append(s.kvs, [3]int{len(s.buf)})
	s.buf = append(append(s.buf, prefixHeader), sid...)
	s.hdr = h
	s.startValue()
	if err := s.enc.Encode(&s.hdr); err != nil {
		return err
	}
	s.endValue()
	return nil
}

// rawSession adds v as it is under the key that is prefix p and sid (the
// context's).
func (s *kvScratch) rawSession(p byte, sid string, v []byte) {
	s.kvs = append(s.kvs, [3]int{len(s.buf)})
	s.buf = append(append(s.buf, p), sid...)
	s.raw(v)
}

// startValue ends the key of the pair begun last; endValue ends its value.
func (s *kvScratch) startValue() { s.kvs[len(s.kvs)-1][1] = len(s.buf) }
func (s *kvScratch) endValue()   { s.kvs[len(s.kvs)-1][2] = len(s.buf) }

// raw ends the pair begun last with v as it is.
func (s *kvScratch) raw(v []byte) {
	s.startValue()
	s.buf = append(s.buf, v...)
	s.endValue()
}

// apply sets every pair gathered into b.
func (s *kvScratch) apply(b *pebble.Batch) error {
	for _, kv := range s.kvs {
		if err := b.Set(s.buf[kv[0]:kv[1]], s.buf[kv[1]:kv[2]], nil); err != nil {
			return err
		}
	}
	return nil
}
