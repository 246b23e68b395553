package cluster

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// A batch whose older entries are still as the log stores them crosses
// the link decoded, in the form every version of a node reads.
func TestStoredBatchCrossesDecoded(t *testing.T) {
	es := []wal.Entry{
		{Seq: 4, Role: "user", Content: "hello", Time: 1.7e9, Metadata: map[string]any{"id": "m1"}},
		{Seq: 5, Role: "agent", Content: "hi", Time: 1.7e9},
	}
	raw, err := wal.EncodeEntry(es[0])
	if err != nil {
		t.Fatal(err)
	}
	in := &machine.BatchOut{Stored: []wal.RawEntry{{Seq: 4, Bytes: raw}}, Messages: es[1:], Omitted: 3, Summary: "s"}
	b, err := msgpack.Marshal(outOf(in))
	if err != nil {
		t.Fatal(err)
	}
	var m outMsg
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	got, ok := m.out().(*machine.BatchOut)
	if !ok || len(got.Stored) != 0 || got.Omitted != 3 || got.Summary != "s" {
		t.Fatalf("got %+v", m.out())
	}
	if len(got.Messages) != 2 || got.Messages[0].Content != "hello" || got.Messages[0].Metadata["id"] != "m1" || !reflect.DeepEqual(got.Messages[1], es[1]) {
		t.Fatalf("messages %+v", got.Messages)
	}
}
