package wal

import (
	"strings"
	"testing"
)

// Config.MemTableSize reaches Pebble: the same 24 MiB of entries flush
// more often under a 1 MiB memtable than under the 64 MiB default.
func TestMemTableSize(t *testing.T) {
	flushes := func(size uint64) int64 {
		l := newTestLog(t, func(c *Config) { c.MemTableSize = size })
		h := mustCreate(t, l, activeHeader("m"))
		content := strings.Repeat("m", 32<<10)
		for seq := uint64(1); seq <= 768; seq += 8 {
			es := make([]Entry, 8)
			for i := range es {
				es[i] = Entry{Seq: seq + uint64(i), Role: "user", Content: content, Time: 1}
			}
			h.LastSeq = seq + 7
			mustAppend(t, l, Batch{SessionID: "m", Epoch: 1, Entries: es, Header: h, NoSync: true})
		}
		return l.db.Metrics().Flush.Count
	}
	small, dflt := flushes(1<<20), flushes(0)
	if small < dflt+8 {
		t.Fatalf("%d flushes with a 1 MiB memtable, %d with the default: the size did not reach Pebble", small, dflt)
	}
}

// Only groups whose requests never read the batch back go unindexed: a
// create, claim, delete or copy reads a header an earlier request of the
// same group may have written.
func TestOnlyWrites(t *testing.T) {
	reads := map[reqKind]bool{reqCreate: true, reqClaim: true, reqDelete: true, reqCopy: true, reqFence: true}
	for k := reqAppend; k <= reqCopy; k++ {
		group := []*request{{kind: reqAppend}, {kind: k}}
		if got := onlyWrites(group); got == reads[k] {
			t.Errorf("request kind %d: onlyWrites = %v", k, got)
		}
	}
}
