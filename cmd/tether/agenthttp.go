package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/tether-dev/tether/actor/engine/httpagent"
)

// agentFlags are serve's --agent-* flags, for --agent http
// (gateway/AGENT-PROTOCOL.md).
type agentFlags struct {
	url, secret string
	timeout     time.Duration
}

func (a *agentFlags) bind(fs *flags) {
	fs.StringVar(&a.url, "agent-url", "", "agent endpoint for --agent http (gateway/AGENT-PROTOCOL.md), e.g. http://127.0.0.1:9000/agent")
	fs.bind("agent-url", envName("agent-url"))
	fs.StringVar(&a.secret, "agent-secret", "", "HMAC secret that signs every request to --agent-url; prefer "+envName("agent-secret")+": a flag shows in ps")
	fs.bind("agent-secret", envName("agent-secret"))
	fs.DurationVar(&a.timeout, "agent-timeout", 2*time.Minute, "time allowed for one request to --agent-url, retries and streamed answer included")
	fs.bind("agent-timeout", envName("agent-timeout"))
}

// check says what --agent http is missing.
func (a *agentFlags) check() error {
	const hint = " (e.g. --agent-url http://127.0.0.1:9000/agent --agent-secret s3cret; see cmd/tether/examples/agent-python)"
	switch {
	case a.url == "":
		return errors.New("serve: --agent http needs --agent-url (or TETHER_AGENT_URL)" + hint)
	case a.secret == "":
		return errors.New("serve: --agent http needs --agent-secret (or TETHER_AGENT_SECRET): the endpoint checks every request's signature" + hint)
	case a.timeout <= 0:
		return errors.New("serve: --agent-timeout must be positive")
	}
	u, err := url.Parse(a.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("serve: --agent-url must be an http(s) URL such as http://127.0.0.1:9000/agent")
	}
	return nil
}

// engine builds the http engine.
func (a *agentFlags) engine(logger *slog.Logger) (*httpagent.Agent, error) {
	e, err := httpagent.New(httpagent.Config{URL: a.url, Secret: []byte(a.secret), Timeout: a.timeout, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	u, _ := url.Parse(a.url)
	logger.Info("http agent", "url", u.Redacted(), "timeout", a.timeout)
	if os.Getenv(envName("agent-secret")) != a.secret {
		logger.Warn("the agent secret was given with --agent-secret, which other local users can see in ps; set " + envName("agent-secret") + " instead")
	}
	return e, nil
}
