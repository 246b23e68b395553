package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tether-dev/tether/gateway/client"
)

func (m *Main) chat(ctx context.Context, args []string) error {
	fs := m.newFlags("chat")
	urls := fs.String("url", env("TETHER_URL", "ws://127.0.0.1:8080/v1/ws"), "node WebSocket URL(s), comma-separated [TETHER_URL]")
	tok := fs.String("token", env("TETHER_TOKEN", ""), "JWT to say hello with [TETHER_TOKEN]")
	user := fs.String("user", "", "ask the node's POST /dev/token for a token for this user (needs serve --dev-tokens)")
	session := fs.String("session", "", "session id to resume")
	lastSeq := fs.Uint64("last-seq", 0, "newest seq of --session already seen")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := client.Config{URLs: strings.Split(*urls, ","), Token: *tok, SessionID: *session, LastSeq: *lastSeq}
	switch {
	case *tok == "" && *user == "":
		return errors.New("chat: give --token or --user")
	case *tok == "":
		u := *user
		cfg.TokenFunc = func(ctx context.Context) (string, error) { return devToken(ctx, cfg.URLs[0], u) }
	}
	fmt.Fprintln(m.Stdout, "connected to", *urls, "— type a message, /help for commands")
	return client.Chat(ctx, cfg, m.Stdin, m.Stdout)
}

// devToken asks a node started with --dev-tokens for a token.
func devToken(ctx context.Context, wsURL, user string) (string, error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return "", fmt.Errorf("chat: bad --url: %w", err)
	}
	u.Scheme = strings.Replace(u.Scheme, "ws", "http", 1)
	u.Path = "/dev/token"
	body, _ := json.Marshal(map[string]string{"user": user})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("chat: dev token: %w", err)
	}
	defer resp.Body.Close()
	var out struct{ Token, Error string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("chat: dev token: HTTP %d %s", resp.StatusCode, out.Error)
	}
	return out.Token, nil
}
