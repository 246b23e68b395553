package client

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/wire"
)

// TestFrameLimit1009: a send over the server's frame limit (here lower
// than the client's) makes the server close with 1009. That send alone
// is refused, never written again; the client reconnects and goes on,
// and a send as large fails at once afterwards.
func TestFrameLimit1009(t *testing.T) {
	n := newNode(t, nodeOpts{maxFrame: 4096})
	tok := n.token(t, "alice", 0)
	p := newProxy(t, n.addr)
	c := dial(t, Config{URLs: []string{p.URL()}, Token: tok})
	ctx := ctxT(t)
	if _, err := c.Send(ctx, "small", nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Send(ctx, strings.Repeat("x", 5000), nil)
	if !errors.Is(err, ErrTooLarge) || !Refused(err) || !strings.Contains(err.Error(), "1009") {
		t.Fatalf("Send over the server's frame limit: %v", err)
	}
	if _, err := c.Send(ctx, "after", nil); err != nil {
		t.Fatalf("Send after the 1009: %v", err)
	}
	conns := p.Count()
	if _, err := c.Send(ctx, strings.Repeat("y", 6000), nil); !errors.Is(err, ErrTooLarge) || strings.Contains(err.Error(), "Config") {
		t.Fatalf("second large Send: %v", err)
	}
	if _, err := c.Send(ctx, "last", nil); err != nil || p.Count() != conns {
		t.Fatalf("Send: %v; %d connections, want %d (no new 1009)", err, p.Count(), conns)
	}
	msgs := collect(t, c, 6)
	contiguous(t, msgs, 1)
	var users []string
	for _, m := range msgs {
		if m.Role == "user" {
			users = append(users, m.Content)
		}
	}
	if strings.Join(users, ",") != "small,after,last" {
		t.Fatalf("user entries %v", users)
	}
	if st := c.Stats(); st.Reconnects != 1 || st.Resends != 0 {
		t.Fatalf("stats %+v", st)
	}
	if snap := n.snapshot(t, c.SessionID(), tok); snap.LastSeq != 6 {
		t.Fatalf("server last_seq %d, want 6", snap.LastSeq)
	}
}

// TestRefusedNeverResent: sends refused with too_large and bad_request
// are answered with a *ServerError and not written again after a
// reconnect.
func TestRefusedNeverResent(t *testing.T) {
	var mu sync.Mutex
	seen := map[int][]string{}
	f := newFake(t, func(n int, ws *websocket.Conn, _ wire.ClientFrame) {
		if n == 0 {
			send(ws, sessionFrame(false, "new", 0))
		} else {
			resumed(ws, 0)
		}
		serveFrames(ws, true, nil, func(fr wire.ClientFrame) {
			mu.Lock()
			seen[n] = append(seen[n], fr.ID)
			mu.Unlock()
			switch fr.ID {
			case "big":
				send(ws, wire.ErrorFrame{Type: wire.TypeError, Code: wire.CodeTooLarge, Message: "content is too long", ID: fr.ID})
			case "bad":
				send(ws, wire.ErrorFrame{Type: wire.TypeError, Code: wire.CodeBadRequest, Message: "nope", ID: fr.ID})
			default:
				send(ws, wire.Ack{Type: wire.TypeAck, ID: fr.ID, Seq: 1})
			}
		})
	})
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t"})
	ctx := ctxT(t)
	var se *ServerError
	if _, err := c.SendID(ctx, "big", "x", nil); !errors.As(err, &se) || se.Code != wire.CodeTooLarge || !errors.Is(err, ErrTooLarge) || !Refused(err) {
		t.Fatalf("too_large send: %v", err)
	}
	if _, err := c.SendID(ctx, "bad", "x", nil); !errors.As(err, &se) || se.Code != wire.CodeBadRequest || !Refused(err) {
		t.Fatalf("bad_request send: %v", err)
	}
	c.Drop()
	if seq, err := c.SendID(ctx, "good", "x", nil); err != nil || seq != 1 {
		t.Fatalf("Send after the drop = %d, %v", seq, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen[0], ",") != "big,bad" || strings.Join(seen[1], ",") != "good" {
		t.Fatalf("sends per connection %v", seen)
	}
}
