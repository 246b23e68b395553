package gateway_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// clientFrame builds a masked client text frame (mask of zero bytes).
func clientFrame(payload string) []byte {
	h := []byte{0x81, 0x80 | 126, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(h[2:4], uint16(len(payload)))
	return append(h, payload...)
}

// TestFramesInOneSegment: frames that reach the server in one TCP write
// (a pong among them), or a frame cut across two writes, are all read and
// answered — the reader never waits on the socket while a frame is
// buffered.
func TestFramesInOneSegment(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodetest.Options{})
	c := dial(t, n.URL)
	checkSession(t, c.hello(nodetest.Token(t, "alice"), "", 0), false, "new", 0, 300)
	raw := c.ws.UnderlyingConn()
	var burst []byte
	for i := range 3 {
		burst = append(burst, clientFrame(fmt.Sprintf(`{"type":"send","id":"b%d","content":"burst %d"}`, i, i))...)
	}
	if _, err := raw.Write(burst); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		seq := c.ackOf(fmt.Sprintf("b%d", i))
		c.message(seq, "user")
		c.message(seq+1, "agent")
	}
	split := clientFrame(`{"type":"send","id":"s1","content":"cut in two"}`)
	for _, part := range [][]byte{split[:5], split[5:]} {
		if _, err := raw.Write(part); err != nil {
			t.Fatal(err)
		}
	}
	seq := c.ackOf("s1")
	c.message(seq, "user")
	c.message(seq+1, "agent")
	// A pong and a frame in one write: the idle wait drops the pong
	// itself and leaves the frame for the reader.
	pongThenSend := append([]byte{0x8a, 0x80 | 2, 0, 0, 0, 0, 'h', 'i'}, clientFrame(`{"type":"send","id":"p1","content":"after a pong"}`)...)
	if _, err := raw.Write(pongThenSend); err != nil {
		t.Fatal(err)
	}
	seq = c.ackOf("p1")
	c.message(seq, "user")
	c.message(seq+1, "agent")
	// A client's WebSocket ping wakes the reader and is answered.
	pong := make(chan string, 1)
	c.ws.SetPongHandler(func(s string) error { pong <- s; return nil })
	if err := c.ws.WriteControl(websocket.PingMessage, []byte("are you there"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	c.sendMsg("after-ping", "still here") // the pong handler runs inside a read
	c.ackOf("after-ping")
	select {
	case s := <-pong:
		if s != "are you there" {
			t.Fatalf("pong %q", s)
		}
	default:
		t.Fatal("no pong before the ack of a later send")
	}
}

// TestIdleConnectionsHoldNoGoroutine: once a connection has nothing more
// to read, its socket is parked in the server's poller and no goroutine
// waits for it (a reader blocked inside gorilla would hold a 4 KiB stack,
// one in cork.Conn.WaitIdle 2 KiB, for as long as the connection is
// idle); the server's heartbeat pings it and takes its pong without
// starting a goroutine for either (a heartbeat to thousands of idle
// connections would start thousands at once), and its next frame is
// read as ever. Not parallel: it counts
// the test binary's goroutines.
func TestIdleConnectionsHoldNoGoroutine(t *testing.T) {
	n := startNode(t, nodetest.Options{Gateway: gateway.Config{PingInterval: 20 * time.Millisecond, PongWait: time.Minute}})
	tok := nodetest.Token(t, "alice")
	const conns = 3
	var pongs atomic.Int32
	var quiet atomic.Bool // pongs stop: nothing but the frame below wakes a connection
	var clients []*wsc
	for i := range conns {
		c := dial(t, n.URL)
		checkSession(t, c.hello(tok, "", 0), false, "new", 0, 300)
		c.chat(fmt.Sprint("m", i), "hello")
		clients = append(clients, c)
		c.ws.SetPingHandler(func(data string) error {
			if quiet.Load() {
				return nil // the server's PongWait is a minute
			}
			pongs.Add(1)
			return c.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		})
		go func() { // reads only to answer pings
			for {
				if _, _, err := c.ws.ReadMessage(); err != nil {
					return
				}
			}
		}()
	}
	actortest.Eventually(t, "pings answered", func() bool { return pongs.Load() >= 5*conns })
	actortest.Eventually(t, "every connection parked, no reader waiting", func() bool {
		parked, _ := n.metric(t, "tether_connections_parked")
		return parked == conns && readerGoroutines() == 0
	})
	// The heartbeat itself runs nothing on the gateway's workers: the
	// pings are written on the reaper's goroutine and the pongs taken on
	// the poller's, so ten more rounds leave the task count as it was.
	tasks, _ := n.metric(t, "tether_connection_tasks_total")
	if tasks == 0 {
		t.Fatal("tether_connection_tasks_total is 0 after the hellos and chats")
	}
	more := pongs.Load() + 10*conns
	actortest.Eventually(t, "ten more heartbeats answered", func() bool { return pongs.Load() >= more })
	if after, _ := n.metric(t, "tether_connection_tasks_total"); after != tasks {
		t.Fatalf("ten heartbeat rounds to %d idle connections ran %.0f tasks on the gateway's workers, want 0", conns, after-tasks)
	}
	// Woken by a frame, a parked connection answers it. The pongs stop
	// first: every 20 ms each would wake its connection for a moment,
	// and under load all of them are seldom parked at the same instant.
	quiet.Store(true)
	raw := clients[0].ws.UnderlyingConn()
	if _, err := raw.Write(clientFrame(`{"type":"ping","id":"p"}`)); err != nil {
		t.Fatal(err)
	}
	actortest.Eventually(t, "the woken connection parked again", func() bool {
		parked, _ := n.metric(t, "tether_connections_parked")
		return parked == conns
	})
}

// readerGoroutines counts the gateway's goroutines reading a connection
// or waiting for one.
func readerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "gateway.(*conn).read") {
			n++
		}
	}
	return n
}
