package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

type point struct {
	X, Y int
	Tag  string
}

func TestLinkManyConcurrentCallsOneConnection(t *testing.T) {
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s", Serve: echoServe})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s", QueueSize: 64})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 100 {
		wg.Go(func() {
			for i := range 30 {
				in := point{X: g, Y: i, Tag: strings.Repeat("x", i)}
				var out point
				if err := a.Call(ctx, b.addr, "echo", in, &out); err != nil {
					errs <- err
					return
				}
				if out != in {
					errs <- fmt.Errorf("sent %+v, got %+v", in, out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var from string
	if err := a.Call(ctx, b.addr, "from", nil, &from); err != nil || from != "a" {
		t.Fatalf("from = %q, %v; want the caller's id", from, err)
	}
	if n := b.acceptedCount(); n != 1 {
		t.Fatalf("b accepted %d connections, want 1", n)
	}
	if id := a.PeerID(b.addr); id != "b" {
		t.Fatalf("PeerID = %q, want b", id)
	}
	if id := a.PeerID("127.0.0.1:1"); id != "" {
		t.Fatalf("PeerID of an unknown address = %q", id)
	}
}

func TestLinkRemoteErrors(t *testing.T) {
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s",
		Serve: func(ctx context.Context, from string, method Op, body msgpack.RawMessage) (any, error) {
			switch method {
			case "stale":
				return nil, WithCode("stale_epoch", errors.New("epoch 3 is older than 5"))
			case "plain":
				return nil, errors.New("plain failure")
			case "unencodable":
				return make(chan int), nil
			}
			return nil, nil
		}})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s"})
	ctx := context.Background()

	err := a.Call(ctx, b.addr, "stale", 1, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != "stale_epoch" || re.Method != "stale" || !strings.Contains(re.Message, "epoch 3") {
		t.Fatalf("err = %#v, want a RemoteError with code stale_epoch", err)
	}
	if ErrorCode(err) != "stale_epoch" || ErrorCode(fmt.Errorf("wrapped: %w", err)) != "stale_epoch" {
		t.Fatal("ErrorCode lost the code")
	}
	err = a.Call(ctx, b.addr, "plain", 1, nil)
	if !errors.As(err, &re) || re.Code != "" || re.Message != "plain failure" {
		t.Fatalf("err = %v, want a RemoteError without code", err)
	}
	if err := a.Call(ctx, b.addr, "unencodable", 1, nil); !errors.As(err, &re) {
		t.Fatalf("a reply that cannot be encoded: %v, want a RemoteError", err)
	}
	if err := a.Call(ctx, b.addr, "nil", 1, nil); err != nil {
		t.Fatalf("a nil reply: %v", err)
	}
	var s string
	if err := a.Call(ctx, b.addr, "nil", 1, &s); err != nil || s != "" {
		t.Fatalf("a nil reply into a string: %q, %v", s, err)
	}
	// A node without Serve answers "unavailable".
	c := startLink(t, "", LinkConfig{NodeID: "c", Secret: "s"})
	if err := a.Call(ctx, c.addr, "x", 1, nil); ErrorCode(err) != "unavailable" {
		t.Fatalf("call to a node without Serve: %v", err)
	}
	if err := a.Call(ctx, b.addr, "x", make(chan int), nil); err == nil {
		t.Fatal("an unencodable request was sent")
	}
}

func TestLinkCallTimeoutCancelsServe(t *testing.T) {
	served := make(chan error, 2)
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s",
		Serve: func(ctx context.Context, from string, method Op, body msgpack.RawMessage) (any, error) {
			<-ctx.Done() // a slow handler: only the caller giving up ends it
			served <- ctx.Err()
			return nil, ctx.Err()
		}})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s", CallTimeout: 300 * time.Millisecond})

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := a.Call(ctx, b.addr, "slow", 1, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("call took %v past its deadline", took)
	}
	if err := <-served; err == nil {
		t.Fatal("the server's ctx ended without an error")
	}
	// Without a ctx deadline, CallTimeout applies.
	if err := a.Call(context.Background(), b.addr, "slow", 1, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded from CallTimeout", err)
	}
	<-served
	// A caller that cancels: the server learns it (cancel frame).
	ctx, cancel = context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }() // cancel mid-call
	if err := a.Call(ctx, b.addr, "slow", 1, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want Canceled", err)
	}
	if err := <-served; !errors.Is(err, context.Canceled) {
		t.Fatalf("server ctx ended with %v, want Canceled by the caller", err)
	}
}

// streamEcho accepts "echo" streams: each value is sent back, and the
// stream is closed when the opener closes it.
func streamEcho(from string, method Op, body msgpack.RawMessage, s *Stream) {
	ctx := context.Background()
	for {
		v, err := s.Recv(ctx)
		if err != nil {
			_ = s.Close()
			return
		}
		if err := s.Send(ctx, v); err != nil {
			return
		}
	}
}

func TestLinkStreamsBothWaysInOrder(t *testing.T) {
	const n = 2000
	// No flow control: a receiver must have room for what a sender may
	// send ahead of it (here, everything).
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s", StreamBuffer: 4*n + 1,
		Accept: func(from string, method Op, body msgpack.RawMessage, s *Stream) {
			if method == "push" { // the accepting side streams n values, then closes
				var count int
				_ = msgpack.Unmarshal(body, &count)
				for i := range count {
					if s.Send(context.Background(), i) != nil {
						return
					}
				}
				_ = s.Close()
				return
			}
			streamEcho(from, method, body, s)
		}})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s", StreamBuffer: n + 1})
	ctx := context.Background()

	var wg sync.WaitGroup
	for range 4 { // concurrent streams share the connection
		wg.Go(func() {
			s, err := a.Open(ctx, b.addr, "echo", nil)
			if err != nil {
				t.Error(err)
				return
			}
			go func() {
				for i := range n {
					if err := s.Send(ctx, i); err != nil {
						t.Errorf("send %d: %v", i, err)
						return
					}
				}
			}()
			for i := range n {
				v, err := s.Recv(ctx)
				var got int
				if err == nil {
					err = msgpack.Unmarshal(v, &got)
				}
				if err != nil || got != i {
					t.Errorf("echo value %d: got %d, %v", i, got, err)
					return
				}
			}
			_ = s.Close()
			if _, err := s.Recv(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("Recv after Close: %v, want ErrClosed", err)
			}
		})
	}
	wg.Wait()

	s, err := a.Open(ctx, b.addr, "push", n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		v, err := s.Recv(ctx)
		var got int
		if err == nil {
			err = msgpack.Unmarshal(v, &got)
		}
		if err != nil || got != i {
			t.Fatalf("pushed value %d: got %d, %v", i, got, err)
		}
	}
	if _, err := s.Recv(ctx); err != io.EOF {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
	if err := s.Send(ctx, 1); err != io.EOF {
		t.Fatalf("Send after the peer closed: %v, want io.EOF", err)
	}
	if s.Peer() != "b" || s.Method() != "push" {
		t.Fatalf("stream peer %q method %q", s.Peer(), s.Method())
	}
	_ = s.Close()
	_ = s.Close()
}

func TestLinkStreamOverflowResetsOnlyThatStream(t *testing.T) {
	const buffer = 16
	stalled := make(chan *Stream, 1)
	b := startLink(t, "", LinkConfig{NodeID: "b", Secret: "s", StreamBuffer: buffer, Serve: echoServe,
		Accept: func(from string, method Op, body msgpack.RawMessage, s *Stream) {
			if method == "stall" { // never reads
				stalled <- s
				<-s.Done()
				return
			}
			streamEcho(from, method, body, s)
		}})
	a := startLink(t, "", LinkConfig{NodeID: "a", Secret: "s"})
	ctx := context.Background()

	echo, err := a.Open(ctx, b.addr, "echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Open(ctx, b.addr, "stall", nil)
	if err != nil {
		t.Fatal(err)
	}
	var sendErr error
	for i := 0; sendErr == nil && i < 100*buffer; i++ {
		sendErr = s.Send(ctx, i)
		if i == 2*buffer { // the reset is on its way; wait for it
			waitClosed(t, s.Done(), "the reset to reach the sender")
		}
	}
	if !errors.Is(sendErr, ErrReset) || !errors.Is(sendErr, ErrOverflow) {
		t.Fatalf("sender sees %v, want ErrReset and ErrOverflow", sendErr)
	}
	if _, err := s.Recv(ctx); !errors.Is(err, ErrReset) {
		t.Fatalf("sender Recv: %v, want ErrReset", err)
	}
	bs := <-stalled
	waitClosed(t, bs.Done(), "the receiver's stream to end")
	if _, err := bs.Recv(ctx); !errors.Is(err, ErrOverflow) {
		t.Fatalf("receiver Recv: %v, want ErrOverflow", err)
	}
	// The connection and its other streams go on.
	if err := echo.Send(ctx, "still here"); err != nil {
		t.Fatal(err)
	}
	if v, err := echo.Recv(ctx); err != nil || !strings.Contains(string(v), "still here") {
		t.Fatalf("echo after the overflow: %q, %v", v, err)
	}
	var out string
	if err := a.Call(ctx, b.addr, "echo", "call", &out); err != nil || out != "call" {
		t.Fatalf("call after the overflow: %q, %v", out, err)
	}
	if n := b.acceptedCount(); n != 1 {
		t.Fatalf("b has %d connections, want the same 1", n)
	}
}
