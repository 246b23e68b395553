package gateway

import (
	"encoding/json"
	"slices"

	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/gateway/internal/jsonenc"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/wal"
)

// MessageOf converts a log entry to its wire form.
func MessageOf(e wal.Entry, typ string) wire.Message {
	md := e.Metadata
	if md == nil {
		md = map[string]any{}
	}
	return wire.Message{Type: typ, Seq: e.Seq, Role: e.Role, Content: e.Content, Timestamp: e.Time, Metadata: md}
}

// PendingOf converts the pending tool call, if any.
func PendingOf(p *machine.ToolCall) *wire.PendingTool {
	if p == nil {
		return nil
	}
	args := p.Args
	if args == nil {
		args = map[string]any{}
	}
	return &wire.PendingTool{CallID: p.CallID, Name: p.Name, Args: args, Status: p.Status, Partial: p.Partial, StartedSeq: p.StartedSeq}
}

func nonNil(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// encodeOut turns what an actor says into the bytes of one text frame.
// EncodeFrame encodes o as the frame a client is sent; a cluster node
// uses it to encode, for clients attached through other nodes, the frames
// it passes on as they are (cluster.Config.EncodeFrame).
func EncodeFrame(o machine.Out) ([]byte, error) { return encodeOut(o) }

func encodeOut(o machine.Out) ([]byte, error) { return appendOut(nil, o) }

// appendOut appends o's frame to b, which it grows once to the frame's
// likely size (b may be a pooled buffer: conn.encode).
func appendOut(b []byte, o machine.Out) ([]byte, error) {
	var v any
	switch o := o.(type) {
	case *machine.EntryOut:
		return jsonenc.AppendMessage(slices.Grow(b, 128+len(o.Entry.Content)), &o.Entry, wire.TypeMessage), nil
	case *machine.AckOut:
		return jsonenc.AppendAck(slices.Grow(b, 48+len(o.ID)), o.ID, o.Seq), nil
	case *machine.DeltaOut:
		return jsonenc.AppendDelta(slices.Grow(b, 64+len(o.Text)), deltaFrame(o)), nil
	case *machine.BatchOut:
		return jsonenc.AppendBatch(slices.Grow(b, batchSize(o)), o.Stored, o.Messages, o.Omitted, o.Summary)
	case *machine.SessionOut:
		v = wire.SessionFrame{
			Type: wire.TypeSession, SessionID: o.SessionID, Resumed: o.Resumed, Reason: o.Reason,
			Status: string(o.Status), LastSeq: o.LastSeq, WindowS: o.Window.Seconds(),
			Context: nonNil(o.Context), PendingToolCall: PendingOf(o.Pending), Sensitive: o.Sensitive,
		}
	case *machine.ContextOut:
		v = wire.ContextFrame{Type: wire.TypeContext, Context: nonNil(o.Context)}
	case *machine.CompletedOut:
		v = wire.CompletedFrame{Type: wire.TypeCompleted, SessionID: o.SessionID}
	case *machine.ErrorOut:
		v = wire.ErrorFrame{Type: wire.TypeError, Code: o.Code, Message: o.Message, ID: o.ID}
	default:
		v = wire.ErrorFrame{Type: wire.TypeError, Code: wire.CodeInternal, Message: "unknown server frame"}
	}
	j, err := json.Marshal(v)
	if len(b) == 0 {
		return j, err
	}
	return append(b, j...), err
}

// batchSize guesses a history_batch's encoded size, to allocate once.
func batchSize(o *machine.BatchOut) int {
	n := 128 + len(o.Summary)
	for i := range o.Stored {
		n += 64 + len(o.Stored[i].Bytes)*5/4 // JSON spells keys and escapes out
	}
	for i := range o.Messages {
		n += 128 + len(o.Messages[i].Content)
	}
	return n
}

// deltaFrame is a delta on the wire: `from` is given whenever the delta
// holds more than one part or starts the reply (part 0), so a client told
// "from 0" drops whatever it held for that seq (a turn run again after a
// crash starts over).
func deltaFrame(o *machine.DeltaOut) wire.Delta {
	d := wire.Delta{Type: wire.TypeDelta, Seq: o.Seq, Part: o.Part, Text: o.Text}
	if o.From != o.Part || o.From == 0 {
		from := o.From
		d.From = &from
	}
	return d
}
