package wal

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// TestHeaderImpliedByEntries: appends whose header changes only in what
// their entries imply (last seq, its epoch, the time) write no header, yet
// every read of the header — and a claim after the log is reopened, as
// after a crash — sees it as if they had; any other change writes it.
func TestHeaderImpliedByEntries(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	base := activeHeader("s")
	base.State = []byte("state-0")
	mustCreate(t, l, base)
	appendAt := func(seq uint64, state string) Header {
		t.Helper()
		e := entry(seq)
		h := base
		h.LastSeq, h.State, h.LastActiveAt = seq, []byte(state), entryTime(e).Add(300*time.Nanosecond)
		mustAppend(t, l, Batch{SessionID: "s", Epoch: max(base.Epoch, 1), Entries: []Entry{e}, Header: h})
		return h
	}
	for s := uint64(1); s <= 5; s++ {
		appendAt(s, "state-1")
	}
	// The first append changed the state, so it wrote the header; the
	// next four changed nothing else.
	if got := storedHeader(t, l, "s"); got.LastSeq != 1 {
		t.Fatalf("stored header after five implied appends says last seq %d, want 1 (written once)", got.LastSeq)
	}
	want := func(h Header, seq uint64) {
		t.Helper()
		if h.LastSeq != seq || h.LastEpoch != 1 || !h.LastActiveAt.Equal(entryTime(entry(seq))) || string(h.State) != "state-1" {
			t.Fatalf("header %+v, want last seq %d, last epoch 1, last active at %v", h, seq, entryTime(entry(seq)))
		}
	}
	want(mustHeader(t, l, "s"), 5)
	want(mustLoad(t, l, "s").Header, 5)
	var scanned Header
	if err := l.ScanHeaders(context.Background(), func(h Header) error { scanned = h; return nil }, nil); err != nil {
		t.Fatal(err)
	}
	want(scanned, 5)

	// Reopened as after a crash, the next owner's claim starts from seq 5.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir)
	d := mustClaim(t, l, "s")
	if d.Header.LastSeq != 5 || d.Header.Epoch != 2 || d.Header.LastEpoch != 1 {
		t.Fatalf("claim after reopen: %+v", d.Header)
	}
	checkEntries(t, "after reopen", readAll(t, l, "s"), span(1, 5))
	// Appends under the new epoch: implied again, and read back with it.
	base = d.Header
	appendAt(6, "state-1")
	appendAt(7, "state-1")
	if h := mustHeader(t, l, "s"); h.LastSeq != 7 || h.LastEpoch != 2 {
		t.Fatalf("after appends under epoch 2: %+v", h)
	}
	// A change of state is written.
	appendAt(8, "state-2")
	if got := storedHeader(t, l, "s"); got.LastSeq != 8 || string(got.State) != "state-2" {
		t.Fatalf("stored header after a change of state: %+v", got)
	}
}

// storedHeader is the header key's value as it is, without settle.
func storedHeader(t *testing.T, l *Log, sid string) Header {
	t.Helper()
	v, closer, err := l.db.Get(headerKey(sid))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	h, err := decodeHeaderOf(sid, v)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestImpliedByEveryField: a change to any header field but the three an
// entry implies makes the header be written (a field added later is
// covered, or this fails).
func TestImpliedByEveryField(t *testing.T) {
	last := entry(9)
	prev := activeHeader("s")
	prev.Epoch, prev.LastEpoch, prev.State = 3, 3, []byte("x")
	next := prev
	next.LastSeq, next.LastActiveAt = 9, entryTime(last)
	if !impliedBy(prev, next, last) {
		t.Fatal("a header that changes only last seq and time is not implied")
	}
	implied := map[string]bool{"LastSeq": true, "LastEpoch": true, "LastActiveAt": true}
	rt := reflect.TypeOf(Header{})
	for i := range rt.NumField() {
		f := rt.Field(i)
		if implied[f.Name] {
			continue
		}
		changed := next
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "-changed")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Uint64, reflect.Uint8, reflect.Uint, reflect.Uint32:
			v.SetUint(v.Uint() + 1)
		case reflect.Int, reflect.Int64, reflect.Int32, reflect.Int8:
			v.SetInt(v.Int() + 1)
		case reflect.Slice:
			v.SetBytes(append([]byte("changed-"), v.Bytes()...))
		case reflect.Struct: // time.Time
			v.Set(reflect.ValueOf(t0.Add(time.Hour)))
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", f.Name, v.Kind())
		}
		if impliedBy(prev, changed, last) {
			t.Errorf("a change of %s is taken as implied by the entries", f.Name)
		}
	}
	// The three implied fields must match the entry.
	for name, h := range map[string]Header{
		"last seq":    func() Header { h := next; h.LastSeq = 8; return h }(),
		"last epoch":  func() Header { h := next; h.LastEpoch = 2; return h }(),
		"time":        func() Header { h := next; h.LastActiveAt = entryTime(last).Add(time.Second); return h }(),
		"time, older": func() Header { h := next; h.LastActiveAt = prev.LastActiveAt.Add(-time.Second); return h }(),
	} {
		if impliedBy(prev, h, last) {
			t.Errorf("a header whose %s does not match the entry is taken as implied", name)
		}
	}
}
