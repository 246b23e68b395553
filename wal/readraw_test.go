package wal

import (
	"reflect"
	"testing"
)

// checkRawIsRead: ReadRaw gives, undecoded, exactly what Read gives, stand-ins
// included, for every range of a log with every kind of bad entry.
func checkRawIsRead(t *testing.T, l *Log, sid string, hi uint64) {
	t.Helper()
	for lo := uint64(0); lo <= hi; lo++ {
		for _, limit := range []int{0, 1, 3, 100} {
			for _, newest := range []bool{false, true} {
				want := mustRead(t, l, sid, lo, hi, limit, newest)
				raw, err := l.ReadRaw(sid, lo, hi, limit, newest)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]Entry, len(raw))
				for i := range raw {
					if got[i], err = raw[i].Decode(); err != nil {
						t.Fatalf("ReadRaw(%d, %d, %d, %v): entry %d: %v", lo, hi, limit, newest, raw[i].Seq, err)
					}
					if raw[i].Seq != got[i].Seq {
						t.Fatalf("entry stored as %d says %d", raw[i].Seq, got[i].Seq)
					}
				}
				if len(want) != 0 && !reflect.DeepEqual(got, want) {
					t.Fatalf("ReadRaw(%d, %d, %d, %v) = %+v, Read gave %+v", lo, hi, limit, newest, got, want)
				}
				if len(want) == 0 && len(got) != 0 {
					t.Fatalf("ReadRaw(%d, %d, %d, %v) = %v, want nothing", lo, hi, limit, newest, seqs(got))
				}
			}
		}
	}
}

func TestReadRawIsReadUndecoded(t *testing.T) {
	t.Run("good", func(t *testing.T) {
		l := newTestLog(t)
		mustCreate(t, l, activeHeader("s"))
		mustAppend(t, l, batch(activeHeader("s"), 1, 1, 10))
		checkRawIsRead(t, l, "s", 13) // past the end: stand-ins
	})
	t.Run("corrupt", func(t *testing.T) {
		l, _, _ := corruptLog(t, true, true)
		checkRawIsRead(t, l, "c", 11)
	})
}
