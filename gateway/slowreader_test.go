package gateway_test

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// TestSlowReaderReadsItsCloseAfterTheServerLeft: a client that stops
// reading, with the kernel's own socket buffers on the server's side, is
// closed with a real 1013 close frame, which the client reads once it
// reads again, after the server has let go of the connection. The server
// gives up either when the client's byte budget runs out (the writer is
// cut short) or when one write to it outlasts the write timeout; either
// way the socket still had room for the close frame, because the server
// never lets the kernel hold much it has not sent (package cork), and the
// frame a write left half sent is finished first.
func TestSlowReaderReadsItsCloseAfterTheServerLeft(t *testing.T) {
	for _, tc := range []struct {
		name     string
		requests int // history pages (~1 MiB each) asked for without reading
		gw       gateway.Config
	}{
		{"byte budget", 300, gateway.Config{MaxQueueBytes: 2 << 20, NoRateLimit: true, WriteTimeout: time.Minute}},
		{"write timeout", 3, gateway.Config{NoRateLimit: true, WriteTimeout: 300 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, nodetest.Options{Gateway: tc.gw, Actor: actor.Config{MaxTurns: 1000}})
			tok := nodetest.Token(t, "alice")
			filler := dial(t, n.URL)
			sid, last := fillBig(t, filler, tok, 40) // 80 entries of 32 KB: a page is ~1 MiB
			filler.closeNow()
			n.waitStatus(t, tok, sid, "interrupted")

			// A small receive buffer only spares the test megabytes of
			// flood; the server's socket is as the kernel makes it.
			c := dialSmall(t, n.URL, 16<<10)
			c.resume(tok, sid, last)
			req := []byte(`{"type":"history","limit":200}`)
			for i := range tc.requests {
				_ = c.ws.SetWriteDeadline(time.Now().Add(20 * time.Second))
				if err := c.ws.WriteMessage(websocket.TextMessage, req); err != nil {
					t.Logf("the server stopped taking frames after %d: %v", i, err)
					break
				}
			}
			actortest.Eventually(t, "the server to close the connection", func() bool {
				open, _ := n.metric(t, "tether_connections")
				slow, _ := n.metric(t, "tether_slow_clients_total")
				return open == 0 && slow == 1
			})

			_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
			pages := 0
			for {
				_, _, err := c.ws.ReadMessage()
				if err == nil {
					pages++
					continue
				}
				ce, ok := err.(*websocket.CloseError)
				if !ok || ce.Code != 1013 {
					t.Fatalf("after %d frames: %v, want a 1013 close frame", pages, err)
				}
				t.Logf("%d frames, then 1013 %q", pages, ce.Text)
				break
			}
		})
	}
}
