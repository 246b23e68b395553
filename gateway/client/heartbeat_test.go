package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/faultnet"
	"github.com/tether-dev/tether/gateway/wire"
)

// serveFrames reads client frames until the socket ends, answering pings
// when pong is set, and hands every send to onSend.
func serveFrames(ws *websocket.Conn, pong bool, pings *atomic.Int64, onSend func(wire.ClientFrame)) {
	for {
		var f wire.ClientFrame
		if err := ws.ReadJSON(&f); err != nil {
			return
		}
		switch f.Type {
		case wire.TypePing:
			if pings != nil {
				pings.Add(1)
			}
			if pong {
				send(ws, wire.Pong{Type: wire.TypePong, ID: f.ID})
			}
		case wire.TypeSend:
			if onSend != nil {
				onSend(f)
			}
		}
	}
}

func resumed(ws *websocket.Conn, last uint64) {
	send(ws, sessionFrame(true, "resumed", last))
	send(ws, wire.HistoryBatch{Type: wire.TypeHistoryBatch, Messages: []wire.Message{}})
}

// waitUntil polls cond (cheap, in-process state) until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHeartbeatAnswered: a silent but live connection is pinged and kept.
func TestHeartbeatAnswered(t *testing.T) {
	var pings atomic.Int64
	f := newFake(t, func(_ int, ws *websocket.Conn, _ wire.ClientFrame) {
		send(ws, sessionFrame(false, "new", 0))
		serveFrames(ws, true, &pings, nil)
	})
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t", PingAfter: 30 * time.Millisecond, PongTimeout: 5 * time.Second})
	waitUntil(t, "three pings", func() bool { return pings.Load() >= 3 })
	if st := c.Stats(); f.conns.Load() != 1 || st.Pings < 3 || st.Silent != 0 || st.Reconnects != 0 {
		t.Fatalf("%d connections, stats %+v", f.conns.Load(), st)
	}
}

// TestHeartbeatUnanswered: no pong means a lost connection, replaced and
// resumed.
func TestHeartbeatUnanswered(t *testing.T) {
	hellos := make(chan wire.ClientFrame, 2)
	f := newFake(t, func(n int, ws *websocket.Conn, hello wire.ClientFrame) {
		hellos <- hello
		if n == 0 {
			send(ws, sessionFrame(false, "new", 0))
			serveFrames(ws, false, nil, nil) // deaf: reads, never answers
			return
		}
		resumed(ws, 0)
		serveFrames(ws, true, nil, nil)
	})
	lostErr := make(chan error, 1)
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t", PingAfter: 50 * time.Millisecond, PongTimeout: 100 * time.Millisecond,
		OnDisconnect: func(_ string, err error) {
			select {
			case lostErr <- err:
			default:
			}
		}})
	<-hellos
	select {
	case h := <-hellos:
		if h.SessionID != "S" {
			t.Fatalf("second hello %+v, want a resume of S", h)
		}
	case <-time.After(wait):
		t.Fatal("the client never reconnected")
	}
	if err := <-lostErr; !errors.Is(err, ErrSilent) || strings.Contains(err.Error(), "Config") {
		t.Fatalf("OnDisconnect got %v, want ErrSilent", err)
	}
	waitUntil(t, "the resume", func() bool { return c.Stats().Reconnects == 1 })
	if st := c.Stats(); st.Silent != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestAckTimeout: a send whose ack does not come, on a connection that
// still answers pings, is resent with its id on a new connection.
func TestAckTimeout(t *testing.T) {
	var mu sync.Mutex
	ids := map[int][]string{}
	f := newFake(t, func(n int, ws *websocket.Conn, _ wire.ClientFrame) {
		if n == 0 {
			send(ws, sessionFrame(false, "new", 0))
		} else {
			resumed(ws, 0)
		}
		serveFrames(ws, true, nil, func(fr wire.ClientFrame) {
			mu.Lock()
			ids[n] = append(ids[n], fr.ID)
			mu.Unlock()
			if n > 0 {
				send(ws, wire.Ack{Type: wire.TypeAck, ID: fr.ID, Seq: 1})
			}
		})
	})
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t", PingAfter: 20 * time.Millisecond, AckTimeout: 300 * time.Millisecond})
	if seq, err := c.Send(ctxT(t), "hi", nil); err != nil || seq != 1 {
		t.Fatalf("Send = %d, %v", seq, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids[0]) != 1 || len(ids[1]) != 1 || ids[0][0] != ids[1][0] {
		t.Fatalf("send ids per connection %v, want the same id once on each", ids)
	}
	if st := c.Stats(); st.AckTimeouts != 1 || st.Resends != 1 || st.Reconnects != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStalledHandshakeBounded: a connection that opens but never answers
// (the network died mid-dial) fails within HandshakeTimeout, and the
// next attempt goes through.
func TestStalledHandshakeBounded(t *testing.T) {
	n := newNode(t, nodeOpts{})
	p := newProxy(t, n.addr)
	p.SetMode(faultnet.Stall)
	var retries atomic.Int64
	c, err := New(Config{URLs: []string{p.URL()}, Token: n.token(t, "alice", 0), HandshakeTimeout: 200 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, Logger: quiet,
		OnRetry: func(string, error, time.Duration) { retries.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitUntil(t, "two failed attempts", func() bool { return retries.Load() >= 2 })
	p.SetMode(faultnet.Up)
	if seq, err := c.Send(ctxT(t), "through", nil); err != nil || seq != 1 {
		t.Fatalf("Send = %d, %v", seq, err)
	}
}

// blackholeRun is the headline scenario through the proxy: the network
// dies silently under an idle, attached client; a message is sent
// during the outage; the network comes back. It returns how long the
// loss took to notice, and checks the message was answered exactly once
// by reading the server's log from seq 0 with a fresh client.
func blackholeRun(t *testing.T, cfg Config, n *node, quiet time.Duration) time.Duration {
	t.Helper()
	p := newProxy(t, n.addr)
	tok := n.token(t, "alice", 0)
	lost := make(chan error, 1)
	cfg.URLs, cfg.Token = []string{p.URL()}, tok
	cfg.OnDisconnect = func(_ string, err error) {
		select {
		case lost <- err:
		default:
		}
	}
	c := dial(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second+wait)
	defer cancel()
	if _, err := c.Send(ctx, "before", nil); err != nil {
		t.Fatal(err)
	}
	contiguous(t, collect(t, c, 2), 1)
	quietFor(t, p, quiet)
	p.Blackhole(faultnet.Refuse)
	start := time.Now()
	sent := make(chan error, 1)
	go func() {
		_, err := c.Send(ctx, "during the outage", nil)
		sent <- err
	}()
	var took time.Duration
	select {
	case err := <-lost:
		took = time.Since(start)
		if !errors.Is(err, ErrSilent) && !errors.Is(err, ErrAckTimeout) {
			t.Fatalf("lost with %v", err)
		}
	case <-time.After(15*time.Second + wait):
		t.Fatal("the loss was never noticed")
	}
	p.SetMode(faultnet.Up)
	if err := <-sent; err != nil {
		t.Fatalf("Send during the outage: %v", err)
	}
	msgs := collect(t, c, 2)
	contiguous(t, msgs, 3)

	// The server's log, read from its start by a fresh client.
	fresh := dial(t, Config{URLs: []string{n.url()}, Token: tok, SessionID: c.SessionID()})
	all := collect(t, fresh, 4)
	contiguous(t, all, 1)
	var users, replies int
	for _, m := range all {
		switch m.Content {
		case "during the outage":
			users++
		case "Agent reply: during the outage":
			replies++
		}
	}
	if users != 1 || replies != 1 || n.snapshot(t, c.SessionID(), tok).LastSeq != 4 {
		t.Fatalf("the outage message was stored %d times and answered %d times: %v", users, replies, all)
	}
	return took
}

func TestBlackholeShortTimings(t *testing.T) {
	n := newNode(t, nodeOpts{})
	took := blackholeRun(t, Config{PingAfter: 200 * time.Millisecond, PongTimeout: 300 * time.Millisecond}, n, 0)
	t.Logf("loss noticed after %v", took)
}

// TestBlackholeDefaults: with the default timings, an idle connection
// that goes silent is noticed within 15s.
func TestBlackholeDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 15s")
	}
	t.Parallel()
	n := newNode(t, nodeOpts{})
	took := blackholeRun(t, Config{}, n, time.Second)
	if took >= 15*time.Second {
		t.Fatalf("the loss took %v to notice, want < 15s", took)
	}
	t.Logf("loss noticed after %v", took)
}
