package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway"
)

// TestTokenReused: reconnects reuse a token that is still valid.
func TestTokenReused(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var calls atomic.Int64
	c := dial(t, Config{URLs: []string{n.url()}, TokenFunc: func(context.Context) (string, error) {
		calls.Add(1)
		return n.token(t, "alice", 0), nil
	}})
	ctx := ctxT(t)
	for i := range 3 {
		c.Drop()
		if _, err := c.Send(ctx, fmt.Sprint("m", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.Reconnects != 3 || calls.Load() != 1 {
		t.Fatalf("stats %+v, TokenFunc called %d times, want once", st, calls.Load())
	}
}

// TestTokenNearExpiry: a token that expires within the minute is not
// reused.
func TestTokenNearExpiry(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var calls atomic.Int64
	c := dial(t, Config{URLs: []string{n.url()}, TokenFunc: func(context.Context) (string, error) {
		calls.Add(1)
		// Issued 59m30s ago with the default hour: 30s left.
		tok, err := gateway.Issue(n.secret, gateway.TokenSpec{User: "alice"}, time.Now().Add(-59*time.Minute-30*time.Second))
		if err != nil {
			return "", err
		}
		return tok, nil
	}})
	ctx := ctxT(t)
	for range 2 {
		c.Drop()
		if _, err := c.Send(ctx, "x", nil); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != 3 {
		t.Fatalf("TokenFunc called %d times, want 3 (every connect)", calls.Load())
	}
}

// TestTokenRefreshedAfterUnauthorized: a reused token the server refuses
// (here: the node behind the proxy now has another secret) is replaced
// by a fresh one, and the session resumes.
func TestTokenRefreshedAfterUnauthorized(t *testing.T) {
	ns := newNodes(t, nodeOpts{fronts: 2, secrets: [][]byte{[]byte("first"), []byte("second")}})
	p := newProxy(t, ns[0].addr)
	var calls, on atomic.Int64
	c := dial(t, Config{URLs: []string{p.URL()}, TokenFunc: func(context.Context) (string, error) {
		calls.Add(1)
		return gateway.Issue(ns[on.Load()].secret, gateway.TokenSpec{User: "alice"}, time.Now())
	}})
	ctx := ctxT(t)
	if _, err := c.Send(ctx, "one", nil); err != nil {
		t.Fatal(err)
	}
	on.Store(1)
	p.SetTarget(ns[1].addr)
	c.Drop()
	if _, err := c.Send(ctx, "two", nil); err != nil {
		t.Fatalf("Send after the secret changed: %v", err)
	}
	if st := c.Stats(); st.Reconnects != 1 || calls.Load() != 2 {
		t.Fatalf("stats %+v, TokenFunc called %d times, want 2", st, calls.Load())
	}
}

// TestTokenFuncUnauthorized: TokenFunc saying no token will come ends
// the client at once.
func TestTokenFuncUnauthorized(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var calls atomic.Int64
	_, err := Dial(ctxT(t), Config{URLs: []string{n.url()}, Logger: quiet, TokenFunc: func(context.Context) (string, error) {
		calls.Add(1)
		return "", fmt.Errorf("%w: this server gives no tokens", ErrUnauthorized)
	}})
	if !errors.Is(err, ErrUnauthorized) || calls.Load() != 1 {
		t.Fatalf("Dial = %v after %d calls", err, calls.Load())
	}
}

func TestTokenTimes(t *testing.T) {
	now := time.Now()
	tok, err := gateway.Issue([]byte("s"), gateway.TokenSpec{User: "bob", TTL: 10 * time.Minute}, now)
	if err != nil {
		t.Fatal(err)
	}
	exp, iat, ok := tokenTimes(tok)
	if !ok || exp.Unix() != now.Add(10*time.Minute).Unix() || iat.Unix() != now.Unix() || TokenSubject(tok) != "bob" {
		t.Fatalf("tokenTimes = %v, %v, %v; sub %q", exp, iat, ok, TokenSubject(tok))
	}
	// A 10-minute token is reused until its last minute; a 2-minute one
	// until its last 30s (a quarter of its life).
	if !reusable(tok, now.Add(8*time.Minute)) || reusable(tok, now.Add(9*time.Minute+10*time.Second)) {
		t.Fatal("10-minute token: wrong reuse window")
	}
	short, _ := gateway.Issue([]byte("s"), gateway.TokenSpec{User: "bob", TTL: 2 * time.Minute}, now)
	if !reusable(short, now.Add(80*time.Second)) || reusable(short, now.Add(100*time.Second)) {
		t.Fatal("2-minute token: wrong reuse window")
	}
	for _, bad := range []string{"", "a.b", "a.!!!.c", "a.e30.c"} { // e30 is {}: no exp
		if reusable(bad, now) {
			t.Fatalf("%q is reusable", bad)
		}
	}
}
