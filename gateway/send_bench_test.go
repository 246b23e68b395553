package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/gateway"
	tnode "github.com/tether-dev/tether/gateway/node"
)

// BenchmarkSendContextSize is issue 6 item 5 end to end: the time from a
// send to its ack on a real node (WebSocket, actor, fsynced log), for a
// session without a context and for one holding 60 KB of it. The context
// is written when it changes, not with every append, so the two should
// be about the same (before, the 60 KB were re-encoded and fsynced with
// every entry).
func BenchmarkSendContextSize(b *testing.B) {
	for _, size := range []int{0, 60_000} {
		b.Run(fmt.Sprintf("context=%dB", size), func(b *testing.B) {
			nd, err := tnode.New(tnode.Config{
				Dir: b.TempDir(), Logger: quiet,
				Actor:   actor.Config{Logger: quiet, MaxTurns: 1 << 20},
				Gateway: gateway.Config{Secret: testSecret, NoRateLimit: true, Logger: quiet},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer nd.Close()
			ws, resp, err := websocket.DefaultDialer.Dial(nd.URL(), nil)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			defer ws.Close()
			tok, err := gateway.Issue(testSecret, gateway.TokenSpec{User: "bench"}, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			type frame struct {
				Type, ID, Code string
				Seq            uint64
			}
			until := func(typ string) frame {
				for {
					var f frame
					if err := ws.ReadJSON(&f); err != nil {
						b.Fatal(err)
					}
					if f.Type == "error" {
						b.Fatalf("error frame: %+v", f)
					}
					if f.Type == typ {
						return f
					}
				}
			}
			must := func(v any) {
				if err := ws.WriteJSON(v); err != nil {
					b.Fatal(err)
				}
			}
			must(map[string]any{"type": "hello", "token": tok})
			until("session")
			if size > 0 {
				must(map[string]any{"type": "context", "set": map[string]any{"blob": strings.Repeat("z", size)}})
				var raw json.RawMessage
				for {
					if err := ws.ReadJSON(&raw); err != nil {
						b.Fatal(err)
					}
					if strings.HasPrefix(string(raw), `{"type":"context"`) {
						break
					}
				}
			}
			b.ResetTimer()
			for i := range b.N {
				must(map[string]any{"type": "send", "id": fmt.Sprint("b", i), "content": "a short message"})
				until("ack")
			}
			b.StopTimer()
		})
	}
}
