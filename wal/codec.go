package wal

import (
	"encoding/binary"
	"fmt"
)

// Key layout; see doc.go.
const (
	prefixHeader  = 'm'
	prefixContext = 'c'
	prefixEntry   = 'e'
	prefixSend    = 's'
	prefixFence   = 'f'
)

var keyAlive = []byte("nalive")

func headerKey(sid string) []byte  { return append([]byte{prefixHeader}, sid...) }
func contextKey(sid string) []byte { return append([]byte{prefixContext}, sid...) }
func fenceKey(sid string) []byte   { return append([]byte{prefixFence}, sid...) }

// sessionPrefix is the start of sid's keys under prefix p; the range ends
// at the same bytes with a final 0x01.
func sessionPrefix(p byte, sid string) []byte {
	k := make([]byte, 0, len(sid)+2+8)
	k = append(k, p)
	k = append(k, sid...)
	return append(k, 0)
}

func sessionEnd(p byte, sid string) []byte {
	k := sessionPrefix(p, sid)
	k[len(k)-1] = 1
	return k
}

func entryKey(sid string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(sessionPrefix(prefixEntry, sid), seq)
}

func sendKey(sid, id string) []byte { return append(sessionPrefix(prefixSend, sid), id...) }

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

func decodeHeaderOf(sid string, b []byte) (Header, error) {
	h, err := DecodeHeader(b)
	if err == nil && h.SessionID != sid {
		err = fmt.Errorf("header names session %q", h.SessionID)
	}
	if err != nil {
		return Header{}, &CorruptError{SessionID: sid, What: "header", Err: err}
	}
	return h, nil
}
