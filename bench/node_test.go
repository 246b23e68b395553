package bench

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// secret is the kit's, given to the in-process nodes and to the `tether
// serve` processes alike, so that tokenFor's tokens work on both.
var secret = []byte(nodetest.Secret)

// startNode starts an in-process node (package nodetest) without rate
// limits: a benchmark's clients send as fast as the node takes it.
func startNode(tb testing.TB, ac actor.Config) *nodetest.Node {
	tb.Helper()
	return nodetest.Start(tb, nodetest.Options{Actor: ac, Gateway: gateway.Config{NoRateLimit: true}})
}

// tokenFor issues user a token that outlives the longest benchmark run.
func tokenFor(tb testing.TB, user string) string {
	tb.Helper()
	return nodetest.Issue(tb, gateway.TokenSpec{User: user, TTL: 24 * time.Hour})
}

// smallDialer keeps the benchmark client's own buffers small, so memory
// figures measured in one process are dominated by the server side.
var smallDialer = &websocket.Dialer{ReadBufferSize: 256, WriteBufferSize: 256, HandshakeTimeout: 10 * time.Second}

type frame struct {
	Type      string            `json:"type"`
	SessionID string            `json:"session_id"`
	LastSeq   uint64            `json:"last_seq"`
	Seq       uint64            `json:"seq"`
	Messages  []json.RawMessage `json:"messages"`
	Code      string            `json:"code"`
}

func readFrame(ws *websocket.Conn) (frame, error) {
	var f frame
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, b, err := ws.ReadMessage()
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, err
	}
	if f.Type == "error" {
		return f, fmt.Errorf("server error frame: %s", b)
	}
	return f, nil
}

// hello connects and says hello; it returns the open socket and the
// session frame.
func hello(url, tok, sid string, lastSeq uint64) (*websocket.Conn, frame, error) {
	ws, resp, err := smallDialer.Dial(url, nil)
	if err != nil {
		return nil, frame{}, err
	}
	resp.Body.Close()
	h := map[string]any{"type": "hello", "token": tok}
	if sid != "" {
		h["session_id"], h["last_seq"] = sid, lastSeq
	}
	if err := ws.WriteJSON(h); err != nil {
		ws.Close()
		return nil, frame{}, err
	}
	f, err := readFrame(ws)
	if err != nil {
		ws.Close()
		return nil, frame{}, err
	}
	return ws, f, nil
}

// fill sends n messages on ws and waits for the echo reply of the last.
func fill(ws *websocket.Conn, n int) (uint64, error) {
	var last uint64
	for i := range n {
		if err := ws.WriteJSON(map[string]any{"type": "send", "id": fmt.Sprintf("m%d", i), "content": fmt.Sprintf("message number %d of the benchmark", i)}); err != nil {
			return 0, err
		}
		// ack, user message, agent reply
		for range 3 {
			f, err := readFrame(ws)
			if err != nil {
				return 0, err
			}
			if f.Type == "message" {
				last = f.Seq
			}
		}
	}
	return last, nil
}
