package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/tether-dev/tether/gateway"
)

// tokenTTL is the lifetime of the tokens the harness signs; they are
// renewed when half of it is gone.
const tokenTTL = time.Hour

// tokens hands out each simulated user's token: signed with the JWT
// secret, or asked from a node's POST /dev/token.
type tokens struct {
	secret []byte   // sign locally when set
	devURL []string // http(s)://host/dev/token of each node otherwise
	http   *http.Client

	mu    sync.Mutex
	cache map[string]cachedToken
}

type cachedToken struct {
	tok   string
	fresh time.Time // renew after this
}

func newTokens(secret []byte, wsURLs []string, tc *tls.Config) (*tokens, error) {
	t := &tokens{secret: secret, cache: make(map[string]cachedToken), http: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: tc}}}
	if len(secret) > 0 {
		return t, nil
	}
	for _, u := range wsURLs {
		p, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("bench: %q: %w", u, err)
		}
		p.Scheme = map[string]string{"ws": "http", "wss": "https"}[p.Scheme]
		p.Path, p.RawQuery = "/dev/token", ""
		t.devURL = append(t.devURL, p.String())
	}
	return t, nil
}

// get returns a valid token for user.
func (t *tokens) get(ctx context.Context, user string) (string, error) {
	now := time.Now()
	t.mu.Lock()
	c, ok := t.cache[user]
	t.mu.Unlock()
	if ok && now.Before(c.fresh) {
		return c.tok, nil
	}
	var tok string
	var err error
	if len(t.secret) > 0 {
		tok, err = gateway.Issue(t.secret, gateway.TokenSpec{User: user, TTL: tokenTTL}, now)
	} else {
		tok, err = t.dev(ctx, user)
	}
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	t.cache[user] = cachedToken{tok: tok, fresh: now.Add(tokenTTL / 2)}
	t.mu.Unlock()
	return tok, nil
}

// dev asks the nodes' POST /dev/token, each in turn until one answers.
func (t *tokens) dev(ctx context.Context, user string) (string, error) {
	body, _ := json.Marshal(map[string]string{"user": user})
	var errs []error
	for _, u := range t.devURL {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := t.http.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		var out struct {
			Token string `json:"token"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || out.Token == "" {
			errs = append(errs, fmt.Errorf("POST %s: HTTP %s: %.200s (is the node started with --dev-tokens?)", u, resp.Status, b))
			continue
		}
		return out.Token, nil
	}
	return "", fmt.Errorf("bench: dev token: %w", errors.Join(errs...))
}
