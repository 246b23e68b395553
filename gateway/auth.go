package gateway

import (
	"errors"
	"fmt"
	"strings"
	"sync"
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
	c, err := parse(secret, token, now)
	if err != nil {
		return Identity{}, err
	}
	return identity(c, now)
}

// parse checks token's signature and claims at now and returns them.
func parse(secret []byte, token string, now time.Time) (*Claims, error) {
	c := new(Claims)
	if _, err := jwt.ParseWithClaims(token, c, func(*jwt.Token) (any, error) { return secret, nil }, checks(now)...); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	return c, nil
}

// checks are the parser's rules for a token at now.
func checks(now time.Time) []jwt.ParserOption {
	return []jwt.ParserOption{
		jwt.WithValidMethods([]string{"HS256"}),
		jwt.WithLeeway(Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	}
}

// identity is who valid claims say the client is, or why they do not.
func identity(c *Claims, now time.Time) (Identity, error) {
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

// verifier is Verify with a memory: a client that reconnects presents
// the token it presented before, and checking its signature and decoding
// its claims again was a tenth of a resume's CPU. The claims of the
// newest tokens that passed are kept by the token's exact text (whose
// signature covered them); their times (exp, iat, nbf, auth_time) are
// checked again on every use, so a remembered token expires as any
// other. At most verifiedTokens are kept, a few hundred KiB.
type verifier struct {
	secret []byte
	mu     sync.Mutex
	seen   map[string]*Claims
}

const verifiedTokens = 1024

func newVerifier(secret []byte) *verifier {
	return &verifier{secret: secret, seen: make(map[string]*Claims)}
}

func (v *verifier) verify(token string, now time.Time) (Identity, error) {
	v.mu.Lock()
	c := v.seen[token]
	v.mu.Unlock()
	if c != nil {
		if err := jwt.NewValidator(checks(now)...).Validate(c); err != nil {
			// Worded as the parser words it.
			return Identity{}, fmt.Errorf("%w: %w: %w", ErrUnauthorized, jwt.ErrTokenInvalidClaims, err)
		}
		return identity(c, now)
	}
	c, err := parse(v.secret, token, now)
	if err != nil {
		return Identity{}, err
	}
	id, err := identity(c, now)
	if err != nil {
		return Identity{}, err
	}
	v.mu.Lock()
	if len(v.seen) >= verifiedTokens {
		for k := range v.seen { // any one: the map's order is random
			delete(v.seen, k)
			break
		}
	}
	v.seen[strings.Clone(token)] = c
	v.mu.Unlock()
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
