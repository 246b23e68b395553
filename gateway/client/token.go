package client

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// tokenMargin is how long before its expiry a token is no longer reused:
// a minute, or a quarter of its lifetime when that is shorter.
const tokenMargin = time.Minute

// jwtClaims are the claims the client reads from a JWT, without verifying
// it: it only needs to know when to ask for a new token, and whose it is,
// and the server checks the rest.
type jwtClaims struct {
	Sub string   `json:"sub"`
	Exp *float64 `json:"exp"`
	Iat *float64 `json:"iat"`
}

func readClaims(tok string) (jwtClaims, bool) {
	var c jwtClaims
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return c, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return c, false
	}
	return c, json.Unmarshal(raw, &c) == nil
}

// tokenTimes reads a JWT's exp and iat (zero when absent).
func tokenTimes(tok string) (exp, iat time.Time, ok bool) {
	c, ok := readClaims(tok)
	if !ok || c.Exp == nil {
		return exp, iat, false
	}
	exp = time.Unix(0, int64(*c.Exp*1e9))
	if c.Iat != nil {
		iat = time.Unix(0, int64(*c.Iat*1e9))
	}
	return exp, iat, true
}

// reusable reports whether tok can be sent in another hello at now: its
// exp is known and not near.
func reusable(tok string, now time.Time) bool {
	exp, iat, ok := tokenTimes(tok)
	if !ok {
		return false
	}
	margin := tokenMargin
	if !iat.IsZero() && exp.After(iat) {
		margin = min(margin, exp.Sub(iat)/4)
	}
	return exp.Sub(now) > margin
}

// TokenSubject reads a JWT's sub claim (the user id) without verifying
// the token; "" when there is none. It is for messages to people, such
// as which user a token belongs to.
func TokenSubject(tok string) string {
	c, _ := readClaims(tok)
	return c.Sub
}
