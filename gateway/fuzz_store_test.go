package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/wal"
)

// storedContexts mirrors package actor's schema of the context blob
// (wal.SessionData.Context: the user's context and the agent's, msgpack
// with these keys), which the log stores as opaque bytes and the actor
// reads back with wal.Unmarshal, the reader with the depth rule.
type storedContexts struct {
	User  map[string]any `msgpack:"u,omitempty"`
	Agent map[string]any `msgpack:"a,omitempty"`
}

// accepted reports whether the server takes f as a frame that stores
// something (a send or a context), by the rules it applies after
// DecodeFrame (hello.go's checkSend; a context needs its set object).
func accepted(f wire.ClientFrame, size int) bool {
	if size > 65536 { // --max-frame
		return false
	}
	switch f.Type {
	case wire.TypeSend:
		n := utf8.RuneCountInString(f.ID)
		return n >= 1 && n <= gateway.MaxSendIDLen && f.Content != "" && len(f.Content) <= 32768
	case wire.TypeContext:
		return f.Set != nil
	}
	return false
}

// FuzzFrameStoredReadBack feeds arbitrary client frames through what the
// server does with them: gateway.DecodeFrame at the door, then for every
// frame it accepts that stores something, the values an actor stores (a
// send's content and metadata as a user entry, a context's set as the
// context blob) appended to a real log, and read back. Every accepted
// frame must read back equal, never as an unreadable stand-in: nothing
// the door lets in can break a session.
func FuzzFrameStoredReadBack(f *testing.F) {
	for _, s := range seedFrames {
		f.Add([]byte(s))
	}
	for _, d := range []int{1, 2, 31, 32, 33, 64, 100} {
		md, _ := json.Marshal(deep(d))
		f.Add(fmt.Appendf(nil, `{"type":"send","id":"d%d","content":"deep","metadata":%s}`, d, md))
		f.Add(fmt.Appendf(nil, `{"type":"context","set":%s}`, md))
	}
	f.Add([]byte(`{"type":"send","id":"n","content":"x","metadata":{"big":1e308,"neg":-0,"int":123456789012345678901234567890,"s":"\u0000\ud800é😀"}}`))
	f.Add([]byte(`{"type":"context","set":{"drop":null,"keep":[null,true,{"":{}}]}}`))
	f.Add([]byte(`{"type":"send","id":"é` + strings.Repeat("é", 63) + `","content":"` + strings.Repeat("c", 32768) + `"}`))

	log, err := wal.New(wal.Config{Dir: f.TempDir(), Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = log.Close() })
	var n atomic.Uint64
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := gateway.DecodeFrame(data)
		if err != nil || !accepted(fr, len(data)) {
			return
		}
		sid := fmt.Sprintf("fuzz-%d", n.Add(1))
		now := time.Now()
		h, err := log.Create(ctx, wal.Header{SessionID: sid, UserID: "fuzz", Status: wal.StatusActive, CreatedAt: now, LastActiveAt: now}, nil)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		corrupt := log.Stats().Corrupt
		switch fr.Type {
		case wire.TypeSend:
			md := map[string]any{}
			for k, v := range fr.Metadata {
				md[k] = v
			}
			md["id"] = fr.ID // what the actor adds
			e := wal.Entry{Seq: 1, Role: wire.RoleUser, Content: fr.Content, Time: float64(now.UnixNano()) / 1e9, Metadata: md}
			h.LastSeq = 1
			if err := log.Append(ctx, wal.Batch{SessionID: sid, Epoch: h.Epoch, Entries: []wal.Entry{e},
				Sends: []wal.Send{{ID: fr.ID, Seq: 1}}, Header: h}); err != nil {
				t.Fatalf("append of an accepted send %q: %v", data, err)
			}
			got, err := log.Read(sid, 1, 2, 1, false)
			if err != nil || len(got) != 1 {
				t.Fatalf("read back %q: %v, %d entries", data, err, len(got))
			}
			if got[0].Content != fr.Content || got[0].Role != wire.RoleUser || !sameJSON(t, got[0].Metadata, md) {
				t.Fatalf("send %q read back as %+v", data, got[0])
			}
			if seq, ok, err := log.SendSeq(sid, fr.ID); err != nil || !ok || seq != 1 {
				t.Fatalf("send id %q read back as %d %v %v", fr.ID, seq, ok, err)
			}
		case wire.TypeContext:
			// The actor merges the set into the stored context; a null
			// value removes its key.
			user := map[string]any{}
			for k, v := range fr.Set {
				if v != nil {
					user[k] = v
				}
			}
			blob, err := msgpack.Marshal(storedContexts{User: user})
			if err != nil {
				t.Fatalf("encode context: %v", err)
			}
			if err := log.Append(ctx, wal.Batch{SessionID: sid, Epoch: h.Epoch, Header: h, Context: blob}); err != nil {
				t.Fatalf("append of an accepted context %q: %v", data, err)
			}
			d, err := log.Load(sid)
			if err != nil {
				t.Fatalf("load %q: %v", data, err)
			}
			var back storedContexts
			if err := wal.Unmarshal(d.Context, &back); err != nil {
				t.Fatalf("context %q accepted at the door but unreadable: %v", data, err)
			}
			if len(user) == 0 && back.User == nil {
				break // omitempty: an empty context is no context
			}
			if !sameJSON(t, back.User, user) {
				t.Fatalf("context %q read back as %v", data, back.User)
			}
		}
		if c := log.Stats().Corrupt; c != corrupt {
			t.Fatalf("frame %q: the log met %d unreadable records reading it back", data, c-corrupt)
		}
		// The header, which ownership is checked from, reads too.
		if hh, err := log.Header(sid); err != nil || hh.UserID != "fuzz" {
			t.Fatalf("header after %q: %+v, %v", data, hh, err)
		}
	})
}
