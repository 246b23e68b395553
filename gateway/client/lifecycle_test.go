package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/faultnet"
	"github.com/tether-dev/tether/gateway/wire"
)

func TestCompleteThenResume(t *testing.T) {
	n := newNode(t, nodeOpts{})
	tok := n.token(t, "alice", 0)
	c := dial(t, Config{URLs: []string{n.url()}, Token: tok})
	ctx := ctxT(t)
	if _, err := c.Send(ctx, "bye", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := ended(t, c); !errors.Is(err, ErrCompleted) {
		t.Fatalf("ended with %v", err)
	}
	// What was held is still delivered, then Messages closes.
	var got []wire.Message
	for m := range c.Messages() {
		got = append(got, m)
	}
	if len(got) == 0 || got[0].Seq != 1 {
		t.Fatalf("entries after complete: %v", seqs(got))
	}
	contiguous(t, got, 1)

	_, err := Dial(ctx, Config{URLs: []string{n.url()}, Token: tok, SessionID: c.SessionID(), LastSeq: 1, Logger: quiet})
	var lost *SessionLostError
	if !errors.As(err, &lost) || lost.Reason != "completed" || lost.NewSessionID == "" || lost.NewSessionID == c.SessionID() {
		t.Fatalf("resume of a completed session: %v", err)
	}
	// The caller may go on in the session the server started.
	d := dial(t, Config{URLs: []string{n.url()}, Token: tok, SessionID: lost.NewSessionID})
	if seq, err := d.Send(ctx, "again", nil); err != nil || seq != 1 {
		t.Fatalf("Send in the new session = %d, %v", seq, err)
	}
}

func TestUnknownSessionAndBadToken(t *testing.T) {
	n := newNode(t, nodeOpts{})
	ctx := ctxT(t)
	a := dial(t, Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)})
	// Another user's session is "not_found", exactly like an unknown id.
	for _, sid := range []string{"no-such-session", a.SessionID()} {
		_, err := Dial(ctx, Config{URLs: []string{n.url()}, Token: n.token(t, "mallory", 0), SessionID: sid, Logger: quiet})
		var lost *SessionLostError
		if !errors.As(err, &lost) || lost.Reason != "not_found" {
			t.Fatalf("resume %s: %v", sid, err)
		}
	}
	bad, _ := gateway.Issue([]byte("wrong secret"), gateway.TokenSpec{User: "alice"}, time.Now())
	_, err := Dial(ctx, Config{URLs: []string{n.url()}, Token: bad, Logger: quiet})
	var se *ServerError
	if !errors.Is(err, ErrUnauthorized) || !errors.As(err, &se) || se.Code != wire.CodeUnauthorized {
		t.Fatalf("bad token: %v", err)
	}
}

// TestReauthRequired: a sensitive session is not resumed with a stale
// login. The client reuses its token while it is valid; when the server
// refuses it (4003), TokenFunc is asked once for a fresh one, and if that
// is stale too the client ends.
func TestReauthRequired(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var calls atomic.Int64
	c := dial(t, Config{URLs: []string{n.url()}, TokenFunc: func(context.Context) (string, error) {
		calls.Add(1)
		return n.token(t, "alice", time.Hour), nil // logged in an hour ago
	}})
	ctx := ctxT(t)
	if _, err := c.SetContext(ctx, map[string]any{"sensitive": true}); err != nil {
		t.Fatal(err)
	}
	c.Drop()
	if err := ended(t, c); !errors.Is(err, ErrReauthRequired) {
		t.Fatalf("ended with %v", err)
	}
	if calls.Load() != 2 {
		t.Fatalf("TokenFunc called %d times, want 2 (the first token, then a fresh one after the refusal)", calls.Load())
	}
}

// TestReauthWithFreshLogin: after a 4003 the fresh token TokenFunc gives
// resumes the sensitive session.
func TestReauthWithFreshLogin(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var calls atomic.Int64
	c := dial(t, Config{URLs: []string{n.url()}, TokenFunc: func(context.Context) (string, error) {
		if calls.Add(1) == 1 {
			return n.token(t, "alice", time.Hour), nil
		}
		return n.token(t, "alice", 0), nil // the user logged in again
	}})
	ctx := ctxT(t)
	if _, err := c.SetContext(ctx, map[string]any{"sensitive": true}); err != nil {
		t.Fatal(err)
	}
	c.Drop()
	if seq, err := c.Send(ctx, "after the login", nil); err != nil || seq != 1 {
		t.Fatalf("Send after the fresh login = %d, %v", seq, err)
	}
	if st := c.Stats(); st.Reconnects != 1 || calls.Load() != 2 {
		t.Fatalf("stats %+v, TokenFunc called %d times", st, calls.Load())
	}
}

// TestNodeShutdown: a node closing with 1012 sends the client to the
// other URL, where it resumes.
func TestNodeShutdown(t *testing.T) {
	ns := newNodes(t, nodeOpts{fronts: 2})
	ps := []*faultnet.Proxy{newProxy(t, ns[0].addr), newProxy(t, ns[1].addr)}
	tok := ns[0].token(t, "alice", 0)
	c := dial(t, Config{URLs: []string{ps[0].URL(), ps[1].URL()}, Token: tok})
	ctx := ctxT(t)
	if _, err := c.Send(ctx, "one", nil); err != nil {
		t.Fatal(err)
	}
	on := 0
	if ps[1].Count() == 1 {
		on = 1
	}
	ns[on].srv.Close()
	if seq, err := c.Send(ctx, "two", nil); err != nil || seq != 3 {
		t.Fatalf("Send after shutdown = %d, %v", seq, err)
	}
	contiguous(t, collect(t, c, 4), 1)
	if ps[1-on].Count() == 0 {
		t.Fatal("the client never went to the other node")
	}
	if st := c.Stats(); st.Reconnects != 1 || st.Gaps != 0 || st.Duplicates != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDropDuringToolRun: the turn goes on while the client is away; the
// resume brings what it produced, and the tool ran once.
func TestDropDuringToolRun(t *testing.T) {
	demo := engine.NewDemo(engine.DemoConfig{SearchDelay: 60 * time.Millisecond})
	n := newNode(t, nodeOpts{engine: demo})
	c := dial(t, Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0)})
	if _, err := c.Send(ctxT(t), "laptops", nil); err != nil {
		t.Fatal(err)
	}
	first := collect(t, c, 2) // the user entry and "search started"
	if first[1].Role != "tool" || first[1].Metadata["status"] != "started" {
		t.Fatalf("entry 2: %+v", first[1])
	}
	c.Drop()
	rest := collect(t, c, 2)
	contiguous(t, append(first, rest...), 1)
	if rest[0].Metadata["status"] != "completed" || rest[1].Role != "agent" {
		t.Fatalf("after the drop: %+v", rest)
	}
	if runs := demo.Runs("search"); runs != 1 {
		t.Fatalf("search ran %d times", runs)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Token: "t"},
		{URLs: []string{"http://127.0.0.1:1/v1/ws"}, Token: "t"},
		{URLs: []string{"ws://127.0.0.1:1/v1/ws"}},
	} {
		if c, err := Dial(ctxT(t), cfg); err == nil {
			c.Close()
			t.Fatalf("Dial(%+v) succeeded", cfg)
		}
	}
}

// TestConnectHooks: OnConnect for every attach, OnDisconnect for every
// attached socket lost, none at Close.
func TestConnectHooks(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var connects, disconnects atomic.Int64
	var mu sync.Mutex
	var reasons []error
	c := dial(t, Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0),
		OnConnect: func(url string) {
			if url == n.url() {
				connects.Add(1)
			}
		},
		OnDisconnect: func(_ string, err error) {
			mu.Lock()
			reasons = append(reasons, err)
			mu.Unlock()
			disconnects.Add(1)
		}})
	for i := range 2 {
		c.Drop()
		waitUntil(t, "the resume", func() bool { return c.Stats().Reconnects == uint64(i+1) })
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	if connects.Load() != 3 || len(reasons) != 2 || !errors.Is(reasons[0], errDropped) {
		t.Fatalf("%d connects, disconnects %v", connects.Load(), reasons)
	}
}
