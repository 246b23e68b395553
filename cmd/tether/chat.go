package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/tether-dev/tether/gateway/client"
)

func (m *Main) chat(ctx context.Context, args []string) error {
	fs := m.newFlags("chat")
	urls := fs.String("url", env("TETHER_URL", "ws://127.0.0.1:8080/v1/ws"), "node WebSocket URL(s), comma-separated [TETHER_URL]")
	tok := fs.String("token", env("TETHER_TOKEN", ""), "JWT to say hello with [TETHER_TOKEN]")
	user := fs.String("user", "", "ask the node's POST /dev/token for a token for this user (needs serve --dev-tokens)")
	session := fs.String("session", "", "session id to resume (attached shared: other chats and tabs on it stay live); its transcript is printed from the start")
	lastSeq := fs.Uint64("last-seq", 0, "with --session: print only the entries after this seq (default: all)")
	pingAfter := fs.Duration("ping-after", 10*time.Second, "ping the server after this long without hearing from it")
	pongTimeout := fs.Duration("pong-timeout", 5*time.Second, "treat the connection as lost when a ping is not answered within this")
	caCert := fs.String("ca-cert", env("TETHER_CA_CERT", ""), "PEM file of the CA to trust for wss:// (default: the system's roots) [TETHER_CA_CERT]")
	ackTimeout := fs.Duration("ack-timeout", 15*time.Second, "treat the connection as lost when a message is not acknowledged within this")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("chat: unexpected argument %q", fs.Arg(0))
	}
	var list []string
	for _, u := range strings.Split(*urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			list = append(list, u)
		}
	}
	cfg := client.Config{URLs: list, Token: *tok, SessionID: *session, LastSeq: *lastSeq,
		PingAfter: *pingAfter, PongTimeout: *pongTimeout, AckTimeout: *ackTimeout}
	if *caCert != "" {
		tc, err := client.LoadCA(*caCert)
		if err != nil {
			return fmt.Errorf("chat: --ca-cert: %w", err)
		}
		cfg.TLS = tc
	}
	switch {
	case *tok == "" && *user == "":
		return errors.New("chat: give --token, or --user to get a dev token from the server")
	case *tok == "":
		dt, err := newDevTokens(list, *user, cfg.TLS)
		if err != nil {
			return err
		}
		cfg.TokenFunc = dt.token
	}
	err := client.Chat(ctx, client.ChatConfig{
		Client: cfg, In: m.Stdin, Out: m.Stdout, Live: isTerminal(m.Stdout),
		ResumeCommand: func(sid string) string { return resumeCommand(*urls, sid, *user, *tok, *caCert) },
	})
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil // interrupted: Chat said how to resume
	case err != nil:
		return fmt.Errorf("chat: %w", err)
	}
	return nil
}

// resumeCommand is the exact command that resumes session sid.
func resumeCommand(urls, sid, user, tok, caCert string) string {
	cmd := "tether chat --url " + shellQuote(urls) + " --session " + shellQuote(sid)
	if caCert != "" {
		cmd += " --ca-cert " + shellQuote(caCert)
	}
	switch {
	case user != "":
		return cmd + " --user " + shellQuote(user)
	case os.Getenv("TETHER_TOKEN") == tok:
		return cmd + ` --token "$TETHER_TOKEN"`
	}
	who := client.TokenSubject(tok)
	if who == "" {
		who = "this user"
	}
	return cmd + " --token <a token for " + who + ">"
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:=,@%+-]+$`)

func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isTerminal says whether w is a terminal, where a countdown can be
// redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// devTokens gets tokens from a node's POST /dev/token. Its HTTP client
// keeps no connection alive between requests and bounds each step, so a
// request after a network change never waits on a pooled connection
// that died with the network (the client reuses a valid token anyway,
// and asks only near its expiry or after a refusal).
type devTokens struct {
	urls []string // http://host:port/dev/token of each node
	user string
	hc   *http.Client
	next int
}

func newDevTokens(wsURLs []string, user string, tc *tls.Config) (*devTokens, error) {
	d := &devTokens{user: user, hc: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			TLSClientConfig:       tc,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: 5 * time.Second,
			DisableKeepAlives:     true,
		},
	}}
	for _, w := range wsURLs {
		u, err := url.Parse(w)
		if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
			return nil, fmt.Errorf("chat: --url %q is not a ws:// or wss:// URL", w)
		}
		u.Scheme = strings.Replace(u.Scheme, "ws", "http", 1)
		u.Path, u.RawQuery = "/dev/token", ""
		d.urls = append(d.urls, u.String())
	}
	return d, nil
}

// token asks the nodes in turn; it runs on the client's dial goroutine,
// one call at a time.
func (d *devTokens) token(ctx context.Context) (string, error) {
	u := d.urls[d.next%len(d.urls)]
	d.next++
	body, _ := json.Marshal(map[string]string{"user": d.user})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("POST /dev/token: %w", err)
	}
	defer resp.Body.Close()
	var out struct{ Token, Error string }
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&out)
	switch {
	case resp.StatusCode == http.StatusOK && out.Token != "":
		return out.Token, nil
	case resp.StatusCode == http.StatusNotFound:
		return "", noToken("the server does not hand out dev tokens (start it with --dev-tokens, or pass --token)")
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return "", noToken(fmt.Sprintf("the server refused a dev token for %q: %s", d.user, out.Error))
	}
	return "", fmt.Errorf("POST /dev/token: HTTP %s %s", resp.Status, out.Error)
}

// noToken is a token request no retry will change: it ends the chat.
type noToken string

func (e noToken) Error() string { return string(e) }
func (e noToken) Unwrap() error { return client.ErrUnauthorized }
