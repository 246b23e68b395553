package gateway

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestVerifierRemembersTokens: a token that passed is not checked against
// the secret again (here the secret changes under the verifier: the
// remembered token still passes, a new one does not), its times are
// (it expires as any token), a tampered copy is a different token, and
// the memory stays bounded.
func TestVerifierRemembersTokens(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Now()
	tok, err := Issue(secret, TokenSpec{User: "alice", TTL: time.Minute, AuthAge: time.Minute}, now)
	if err != nil {
		t.Fatal(err)
	}
	v := newVerifier(secret)
	for range 2 {
		if id, err := v.verify(tok, now); err != nil || id.UserID != "alice" || !id.AuthTime.Equal(now.Add(-time.Minute).Truncate(time.Second)) {
			t.Fatalf("verify: %+v, %v", id, err)
		}
	}
	v.secret = []byte("another")
	if _, err := v.verify(tok, now); err != nil {
		t.Fatalf("a remembered token: %v", err)
	}
	other, _ := Issue(secret, TokenSpec{User: "bob", TTL: time.Minute}, now)
	if _, err := v.verify(other, now); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("a new token checked against the wrong secret: %v", err)
	}
	tampered := tok[:len(tok)-2] + "AA"
	if tampered == tok {
		tampered = tok[:len(tok)-2] + "BB"
	}
	if _, err := v.verify(tampered, now); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("a tampered token: %v", err)
	}
	later := now.Add(time.Minute + Leeway + time.Second)
	if _, err := v.verify(tok, later); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("a remembered token past its exp: %v", err)
	}
	_, want := Verify(secret, tok, later)
	if _, got := v.verify(tok, later); got.Error() != want.Error() {
		t.Fatalf("a remembered token's refusal %q, the parser's %q", got, want)
	}

	v = newVerifier(secret)
	for i := range verifiedTokens + 50 {
		tk, _ := Issue(secret, TokenSpec{User: fmt.Sprint("u", i), TTL: time.Minute}, now)
		if _, err := v.verify(tk, now); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(v.seen); n > verifiedTokens {
		t.Fatalf("%d tokens remembered, at most %d", n, verifiedTokens)
	}
}
