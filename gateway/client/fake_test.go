package client

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/wire"
)

// fake is a scripted server for what a correct Tether node never does
// (gaps, duplicates) and for every close code. script runs once per
// connection, numbered from 0, after the hello was read.
type fake struct {
	srv   *httptest.Server
	conns atomic.Int64
}

type script func(n int, ws *websocket.Conn, hello wire.ClientFrame)

func newFake(t *testing.T, run script) *fake {
	t.Helper()
	f := &fake{}
	up := websocket.Upgrader{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		var hello wire.ClientFrame
		if err := ws.ReadJSON(&hello); err != nil {
			return
		}
		run(int(f.conns.Add(1)-1), ws, hello)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) url() string { return "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/v1/ws" }

func send(ws *websocket.Conn, v any) { _ = ws.WriteJSON(v) }

func msg(seq uint64) wire.Message {
	return wire.Message{Type: wire.TypeMessage, Seq: seq, Role: "agent", Content: "x", Metadata: map[string]any{}}
}

func sessionFrame(resumed bool, reason string, last uint64) wire.SessionFrame {
	return wire.SessionFrame{Type: wire.TypeSession, SessionID: "S", Resumed: resumed, Reason: reason,
		Status: "active", LastSeq: last, WindowS: 300, Context: map[string]any{}}
}

// drain reads until the client goes away.
func drain(ws *websocket.Conn) {
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			return
		}
	}
}

func closeWith(ws *websocket.Conn, code int) {
	_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, "test"))
	drain(ws)
}

func TestDuplicateDroppedGapRepaired(t *testing.T) {
	hellos := make(chan wire.ClientFrame, 2)
	f := newFake(t, func(n int, ws *websocket.Conn, hello wire.ClientFrame) {
		hellos <- hello
		switch n {
		case 0:
			send(ws, sessionFrame(false, "new", 0))
			send(ws, msg(1))
			send(ws, msg(1)) // duplicate
			send(ws, msg(3)) // gap: 2 is missing
		case 1:
			send(ws, sessionFrame(true, "resumed", 4))
			send(ws, wire.HistoryBatch{Type: wire.TypeHistoryBatch, Messages: []wire.Message{msg(2), msg(3), msg(4)}, FirstSeq: 2, LastSeq: 4})
			send(ws, msg(4)) // duplicate of a replayed entry
			send(ws, msg(5))
		}
		drain(ws)
	})
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t"})
	contiguous(t, collect(t, c, 5), 1)
	<-hellos
	if h := <-hellos; h.SessionID != "S" || h.LastSeq != 1 {
		t.Fatalf("resume hello %+v, want session S from seq 1", h)
	}
	if st := c.Stats(); st.Duplicates != 2 || st.Gaps != 1 || st.Reconnects != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCloseCodes(t *testing.T) {
	for _, tc := range []struct {
		code    int
		errCode string // an error frame before the close
		want    error  // nil: the client resumes
	}{
		{1006, "", nil}, // no close frame at all
		{1009, "", nil}, // with no send waiting: nothing to refuse
		{1011, wire.CodeInternal, nil},
		{1012, "", nil},
		{1013, wire.CodeUnavailable, nil},
		{1000, "", ErrCompleted},
		{4001, "", ErrSuperseded},
		{4003, wire.CodeReauthRequired, ErrReauthRequired},
		{1008, wire.CodeUnauthorized, ErrUnauthorized},
	} {
		f := newFake(t, func(n int, ws *websocket.Conn, _ wire.ClientFrame) {
			if n > 0 {
				send(ws, sessionFrame(true, "resumed", 0))
				send(ws, wire.HistoryBatch{Type: wire.TypeHistoryBatch, Messages: []wire.Message{}})
				drain(ws)
				return
			}
			send(ws, sessionFrame(false, "new", 0))
			if tc.errCode != "" {
				send(ws, wire.ErrorFrame{Type: wire.TypeError, Code: tc.errCode, Message: "test"})
			}
			if tc.code == 1006 {
				ws.Close()
				return
			}
			closeWith(ws, tc.code)
		})
		resumed := make(chan struct{}, 1)
		c := dial(t, Config{URLs: []string{f.url()}, Token: "t", OnSession: func(f wire.SessionFrame) {
			if f.Resumed {
				resumed <- struct{}{}
			}
		}})
		if tc.want != nil {
			if err := ended(t, c); !errors.Is(err, tc.want) {
				t.Errorf("close %d: client ended with %v, want %v", tc.code, err, tc.want)
			}
			continue
		}
		select {
		case <-resumed:
		case <-c.Done():
			t.Fatalf("close %d: client ended with %v", tc.code, c.Err())
		}
		// The history_batch is the manager's next event: a round trip or
		// two through it sees the session attached.
		for c.Stats().Reconnects == 0 && c.Err() == nil {
			c.LastSeq()
		}
		if err := c.Err(); err != nil {
			t.Fatalf("close %d: client ended with %v", tc.code, err)
		}
		c.Close()
	}
}

func TestSessionLost(t *testing.T) {
	f := newFake(t, func(n int, ws *websocket.Conn, _ wire.ClientFrame) {
		if n == 0 {
			send(ws, sessionFrame(false, "new", 0))
			ws.Close() // 1006
			return
		}
		lost := sessionFrame(false, "expired", 0)
		lost.SessionID = "T"
		send(ws, lost)
		drain(ws)
	})
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t"})
	_, err := c.Send(ctxT(t), "hello", nil)
	var lost *SessionLostError
	if !errors.As(err, &lost) || !errors.Is(err, ErrSessionLost) || lost.Reason != "expired" ||
		lost.SessionID != "S" || lost.NewSessionID != "T" {
		t.Fatalf("Send: %v", err)
	}
	if !errors.Is(c.Err(), ErrSessionLost) {
		t.Fatalf("Err = %v", c.Err())
	}
}

func TestRateLimitedSendRetried(t *testing.T) {
	f := newFake(t, func(_ int, ws *websocket.Conn, _ wire.ClientFrame) {
		send(ws, sessionFrame(false, "new", 0))
		for i := 0; ; i++ {
			var fr wire.ClientFrame
			if err := ws.ReadJSON(&fr); err != nil {
				return
			}
			if i == 0 {
				send(ws, wire.ErrorFrame{Type: wire.TypeError, Code: wire.CodeRateLimited, Message: "slow down", ID: fr.ID})
				continue
			}
			send(ws, wire.Ack{Type: wire.TypeAck, ID: fr.ID, Seq: 1})
		}
	})
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t"})
	if seq, err := c.Send(ctxT(t), "hi", nil); err != nil || seq != 1 {
		t.Fatalf("Send = %d, %v", seq, err)
	}
	if st := c.Stats(); st.Resends != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A resume the client gave up on (its hello unanswered past the handshake
// timeout) may still reach the session after the client's next
// connection did, and supersede it: that 4001 is the client's own doing,
// so it resumes once more. A second 4001 is a real takeover and ends it.
func TestSupersededByOwnLateHello(t *testing.T) {
	f := newFake(t, func(n int, ws *websocket.Conn, _ wire.ClientFrame) {
		switch n {
		case 0: // attached, then the network drops
			send(ws, sessionFrame(false, "new", 0))
			send(ws, msg(1))
			return
		case 1: // a paused server: the hello is never answered
			drain(ws)
			return
		case 2, 3: // resumed, then superseded (first by the late hello, then for real)
			send(ws, sessionFrame(true, "resumed", 1))
			send(ws, wire.HistoryBatch{Type: wire.TypeHistoryBatch, Messages: []wire.Message{}})
			closeWith(ws, 4001)
			return
		}
		t.Errorf("connection %d: the client should have ended at the second 4001", n)
	})
	c := dial(t, Config{URLs: []string{f.url()}, Token: "t", HandshakeTimeout: 300 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err := ended(t, c); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("ended with %v, want ErrSuperseded after the second 4001", err)
	}
	if n := f.conns.Load(); n != 4 {
		t.Fatalf("%d connections, want 4: the first 4001 follows a hello the client gave up on", n)
	}
}
