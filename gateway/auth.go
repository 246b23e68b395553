package gateway

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// Leeway is the clock skew tolerated on exp, iat and nbf.
const Leeway = 30 * time.Second

// MaxUserLen is the longest user id (sub) a token may carry.
const MaxUserLen = 128

// ErrUnauthorized wraps every reason a token is refused.
var ErrUnauthorized = errors.New("unauthorized")

// Claims are the token claims Tether reads.
type Claims struct {
	jwt.RegisteredClaims
	// AuthTime is the user's last interactive login (OIDC's auth_time).
	AuthTime *jwt.NumericDate `json:"auth_time,omitempty"`
}

// Identity is who a valid token says the client is.
type Identity struct {
	UserID   string
	AuthTime time.Time // zero when the token has none
}

// Verify checks an HS256 token against secret and returns its identity.
func Verify(secret []byte, token string, now time.Time) (Identity, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}),
		jwt.WithLeeway(Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	if n := utf8.RuneCountInString(c.Subject); n < 1 || n > MaxUserLen {
		return Identity{}, fmt.Errorf("%w: sub must be 1–%d characters", ErrUnauthorized, MaxUserLen)
	}
	id := Identity{UserID: c.Subject}
	if c.AuthTime != nil {
		id.AuthTime = c.AuthTime.Time
		// A login in the future would count as fresh for ever.
		if id.AuthTime.After(now.Add(Leeway)) {
			return Identity{}, fmt.Errorf("%w: auth_time is in the future", ErrUnauthorized)
		}
	}
	return id, nil
}

// TokenSpec describes a token to issue.
type TokenSpec struct {
	User string
	TTL  time.Duration // default 1h
	// AuthAge is how long ago the user logged in interactively: auth_time
	// is now-AuthAge. Negative leaves auth_time out.
	AuthAge time.Duration
}

// Issue signs a token for spec with secret.
func Issue(secret []byte, spec TokenSpec, now time.Time) (string, error) {
	if n := utf8.RuneCountInString(spec.User); n < 1 || n > MaxUserLen {
		return "", fmt.Errorf("user must be 1–%d characters", MaxUserLen)
	}
	if len(secret) == 0 {
		return "", errors.New("empty signing secret")
	}
	if spec.TTL <= 0 {
		spec.TTL = time.Hour
	}
	c := Claims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:   spec.User,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(spec.TTL)),
	}}
	if spec.AuthAge >= 0 {
		c.AuthTime = jwt.NewNumericDate(now.Add(-spec.AuthAge))
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}
