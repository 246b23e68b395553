package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/actor/actortest"
)

// blockingServe answers "echo", and holds "hold" calls until their ctx
// ends, counting them on held.
func blockingServe(held chan<- struct{}) func(context.Context, string, Op, msgpack.RawMessage) (any, error) {
	return func(ctx context.Context, from string, method Op, body msgpack.RawMessage) (any, error) {
		if method == "hold" {
			held <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return echoServe(ctx, from, method, body)
	}
}

func TestLinkPeerRestart(t *testing.T) {
	held := make(chan struct{}, 8)
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s", Serve: blockingServe(held),
		Accept: func(from string, method Op, body msgpack.RawMessage, s *Stream) { <-s.Done() }})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s"})
	ctx := context.Background()
	var out string
	if err := a.Call(ctx, b.addr, "echo", "one", &out); err != nil {
		t.Fatal(err)
	}
	s, err := a.Open(ctx, b.addr, "wait", nil)
	if err != nil {
		t.Fatal(err)
	}
	pending := make(chan error, 1)
	go func() { pending <- a.Call(ctx, b.addr, "hold", nil, nil) }()
	<-held

	b.stop() // the peer goes away
	if err := <-pending; !errors.Is(err, ErrLinkDown) {
		t.Fatalf("pending call: %v, want ErrLinkDown", err)
	}
	waitClosed(t, s.Done(), "the stream to fail")
	if _, err := s.Recv(ctx); !errors.Is(err, ErrLinkDown) {
		t.Fatalf("stream Recv: %v, want ErrLinkDown", err)
	}
	if err := a.Call(ctx, b.addr, "echo", "down", &out); !errors.Is(err, ErrLinkDown) {
		t.Fatalf("call while the peer is down: %v, want ErrLinkDown", err)
	}

	b2 := startLink(t, b.addr, LinkConfig{NodeID: "b", Secret: "s", Serve: echoServe})
	actortest.Eventually(t, "a call to the restarted peer", func() bool {
		err := a.Call(ctx, b.addr, "echo", "two", &out)
		if err != nil && !errors.Is(err, ErrLinkDown) {
			t.Fatalf("call to the restarting peer: %v", err)
		}
		return err == nil && out == "two"
	})
	if b2.acceptedCount() != 1 {
		t.Fatalf("restarted peer has %d connections", b2.acceptedCount())
	}
}

func TestLinkWrongSecretRefused(t *testing.T) {
	lg, rec := newLogRecorder()
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "right", Serve: echoServe, Logger: lg})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "wrong"})
	err := a.Call(context.Background(), b.addr, "echo", "x", nil)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("call with the wrong secret: %v, want ErrAuth", err)
	}
	actortest.Eventually(t, "the server to log the refused peer", func() bool { return rec.count("authentication") > 0 })
	if b.acceptedCount() != 0 {
		t.Fatal("the server kept a connection from a peer with the wrong secret")
	}
}

func TestLinkHandshakeRefusals(t *testing.T) {
	lg, rec := newLogRecorder()
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s", Serve: echoServe, Logger: lg})
	url := "http://" + b.addr + "/v1/link"
	httpc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, tc := range []struct {
		hdr  map[string]string
		want int
	}{
		{nil, http.StatusBadRequest},
		{map[string]string{hdrVersion: "1"}, http.StatusUnauthorized},
		{map[string]string{hdrVersion: "1", hdrNode: "x", hdrNonce: "short"}, http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range tc.hdr {
			req.Header.Set(k, v)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("headers %v: status %d, want %d", tc.hdr, resp.StatusCode, tc.want)
		}
	}

	// A client that knows the protocol but not the secret: it cannot make
	// the proof, and is closed with a policy violation.
	h := http.Header{}
	h.Set(hdrVersion, "1")
	h.Set(hdrNode, "mallory")
	h.Set(hdrNonce, base64.RawURLEncoding.EncodeToString(newNonce()))
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+b.addr+"/v1/link", h)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.BinaryMessage, make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(waitFor))
	_, _, err = ws.ReadMessage()
	if !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
		t.Fatalf("after a bad proof: %v, want a 1008 close", err)
	}
	if rec.count("authentication failed", "mallory") == 0 {
		t.Fatal("the bad proof was not logged")
	}
	if b.acceptedCount() != 0 {
		t.Fatal("a connection without a valid proof was kept")
	}
}

func TestLinkCloseWithCallsInFlight(t *testing.T) {
	held := make(chan struct{}, 16)
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s", Serve: blockingServe(held)})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s"})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- a.Call(ctx, b.addr, "hold", nil, nil) })
	}
	for range 8 {
		<-held
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("in-flight call: %v, want ErrClosed", err)
		}
	}
	if err := a.Call(ctx, b.addr, "echo", 1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v, want ErrClosed", err)
	}
	if _, err := a.Open(ctx, b.addr, "x", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("open after Close: %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// The server side's Serves were cancelled when a's connection went.
	actortest.Eventually(t, "b to drop the connection", func() bool { return b.acceptedCount() == 0 })
}

func TestLinkCloseEndsServesAndStreams(t *testing.T) {
	held := make(chan struct{}, 1)
	accepted := make(chan *Stream, 1)
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s", Serve: blockingServe(held),
		Accept: func(from string, method Op, body msgpack.RawMessage, s *Stream) {
			accepted <- s
			<-s.Done() // Close must end this
		}})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s"})
	ctx := context.Background()
	s, err := a.Open(ctx, b.addr, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	bs := <-accepted
	call := make(chan error, 1)
	go func() { call <- a.Call(ctx, b.addr, "hold", nil, nil) }()
	<-held
	if err := b.Close(); err != nil { // returns only once Serve and Accept have
		t.Fatal(err)
	}
	if _, err := bs.Recv(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("server stream after Close: %v, want ErrClosed", err)
	}
	if err := <-call; !errors.Is(err, ErrLinkDown) {
		t.Fatalf("call to a closing peer: %v, want ErrLinkDown", err)
	}
	waitClosed(t, s.Done(), "the client stream to fail")
}

// TestLinkSilentPeerDropped: a peer that completes the handshake and then
// reads nothing (so answers no ping) is dropped after three ping intervals.
func TestLinkSilentPeerDropped(t *testing.T) {
	proofs, _ := NewLink(LinkConfig{NodeID: "b", Secret: "s"}) // computes b's proofs
	defer proofs.Close()
	stop := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/link", func(w http.ResponseWriter, r *http.Request) {
		nd, _ := decodeNonce(r.Header.Get(hdrNonce))
		ns := newNonce()
		h := http.Header{}
		h.Set(hdrNode, "b")
		h.Set(hdrNonce, b64(ns))
		h.Set(hdrProof, b64(proofs.proof("server", [2][]byte{nd, ns}, [2]string{"b", r.Header.Get(hdrNode)})))
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, h)
		if err != nil {
			return
		}
		defer ws.Close()
		_, _, _ = ws.ReadMessage()
		_ = ws.WriteMessage(websocket.BinaryMessage, authOK)
		<-stop // silent from now on
	})
	b := startHTTP(t, mux)
	defer close(stop)

	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s", PingInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	start := time.Now()
	err := a.Call(ctx, b, "echo", 1, nil)
	if !errors.Is(err, ErrLinkDown) {
		t.Fatalf("call to a silent peer: %v, want ErrLinkDown", err)
	}
	t.Logf("silent peer dropped after %v", time.Since(start))
}

func TestLinkLimits(t *testing.T) {
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s", Serve: echoServe, MaxFrame: 1024})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s", MaxFrame: 1024})
	ctx := context.Background()
	if err := a.Call(ctx, b.addr, "echo", strings.Repeat("x", 2000), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized request: %v, want ErrTooLarge", err)
	}
	if err := a.Call(ctx, b.addr, "echo", strings.Repeat("x", 500), nil); err != nil {
		t.Fatal(err)
	}
	open := startLink(t, "", LinkConfig{NodeID: "c"})
	if err := open.Call(ctx, "192.0.2.1:80", "echo", 1, nil); !errors.Is(err, ErrAuth) {
		t.Fatalf("no secret to a non-loopback peer: %v, want ErrAuth", err)
	}
	var out int
	if err := open.Call(ctx, startLink(t, "", LinkConfig{NodeID: "d", Serve: echoServe}).addr, "echo", 7, &out); err != nil || out != 7 {
		t.Fatalf("no secret on loopback: %d, %v", out, err)
	}
	if _, err := NewLink(LinkConfig{}); err == nil {
		t.Fatal("a Link without NodeID")
	}
}
