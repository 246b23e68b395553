package nodetest

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway"
)

// Secret is the HS256 secret the nodes Start starts check tokens with
// (unless Options.Gateway.Secret names another) and Token, Issue and
// ExpiredToken sign with. A string, so that it cannot be changed under
// the tests sharing it, and so that it can be a `tether serve
// --jwt-secret` too.
const Secret = "nodetest-secret"

// Token issues user a token signed with Secret, valid from now for
// gateway.Issue's default lifetime.
func Token(t testing.TB, user string) string {
	t.Helper()
	return Issue(t, gateway.TokenSpec{User: user})
}

// Issue issues the token spec describes, signed with Secret, from now.
func Issue(t testing.TB, spec gateway.TokenSpec) string {
	t.Helper()
	tok, err := gateway.Issue([]byte(Secret), spec, time.Now())
	if err != nil {
		t.Fatalf("nodetest: issue a token: %v", err)
	}
	return tok
}

// ExpiredToken issues user a token signed with Secret that expired an
// hour ago (issued two hours ago, without auth_time): well outside
// gateway.Leeway, so it is refused for its expiry alone.
func ExpiredToken(t testing.TB, user string) string {
	t.Helper()
	tok, err := gateway.Issue([]byte(Secret), gateway.TokenSpec{User: user, TTL: time.Hour, AuthAge: -1}, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatalf("nodetest: issue an expired token: %v", err)
	}
	return tok
}
