package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/tether-dev/tether/actor/engine/llm"
)

// keyEnv is where the API key is read from. It is not envName's
// TETHER_OPENAI_KEY: the variable says what it holds.
const keyEnv = "TETHER_OPENAI_API_KEY"

// openaiFlags are serve's --openai-* flags, for --agent openai.
type openaiFlags struct {
	baseURL, model, key string
	maxHistory          int
	timeout             time.Duration
}

func (o *openaiFlags) bind(fs *flags) {
	fs.StringVar(&o.baseURL, "openai-base-url", "", "OpenAI-compatible API for --agent openai, e.g. http://127.0.0.1:11434/v1 (Ollama), http://127.0.0.1:8080/v1 (llama-server); its own tools are demo placeholders, search (canned results) and get_time; real tools come from --mcp")
	fs.bind("openai-base-url", envName("openai-base-url"))
	fs.StringVar(&o.model, "openai-model", "", "model name for --agent openai")
	fs.bind("openai-model", envName("openai-model"))
	fs.StringVar(&o.key, "openai-key", "", "API key for --agent openai; prefer "+keyEnv+": a flag shows in ps (local servers need none)")
	fs.bind("openai-key", keyEnv)
	fs.IntVar(&o.maxHistory, "openai-max-history", 16000, "bytes of earlier conversation sent to the model; the session summary stands in for the rest")
	fs.bind("openai-max-history", envName("openai-max-history"))
	fs.DurationVar(&o.timeout, "openai-timeout", 2*time.Minute, "time allowed for one model request, streamed reply included")
	fs.bind("openai-timeout", envName("openai-timeout"))
}

// check says what --agent openai is missing.
func (o *openaiFlags) check() error {
	const hint = " (e.g. --openai-base-url http://127.0.0.1:11434/v1 --openai-model llama3.2 for Ollama)"
	switch {
	case o.baseURL == "":
		return errors.New("serve: --agent openai needs --openai-base-url (or TETHER_OPENAI_BASE_URL)" + hint)
	case o.model == "":
		return errors.New("serve: --agent openai needs --openai-model (or TETHER_OPENAI_MODEL)" + hint)
	case o.maxHistory < 1 || o.timeout <= 0:
		return errors.New("serve: --openai-max-history must be ≥ 1 and --openai-timeout positive")
	}
	u, err := url.Parse(o.baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("serve: --openai-base-url must be an http(s) URL such as http://127.0.0.1:11434/v1")
	}
	return nil
}

// engine builds the openai engine, with the demo placeholder tools (its
// search takes searchDelay) and the tools of mcp's servers; stop stops
// both.
func (o *openaiFlags) engine(ctx context.Context, searchDelay time.Duration, mcp *mcpFlags, logger *slog.Logger) (e *llm.Engine, stop func(), err error) {
	builtin := llm.BuiltinTools(llm.BuiltinToolsConfig{SearchDelay: searchDelay})
	set, err := mcp.toolSet(ctx, builtin, logger)
	if err != nil {
		return nil, nil, err
	}
	cfg := llm.Config{
		BaseURL: o.baseURL, Model: o.model, APIKey: o.key, MaxHistoryBytes: o.maxHistory, Timeout: o.timeout,
		Tools: builtin, Logger: logger,
	}
	stopTools := func() {}
	if set != nil {
		cfg.ToolSource, stopTools = set, func() { set.Close() }
	}
	if e, err = llm.New(cfg); err != nil {
		stopTools()
		return nil, nil, fmt.Errorf("serve: %w", err)
	}
	u, _ := url.Parse(o.baseURL)
	logger.Info("openai engine", "base_url", u.Redacted(), "model", o.model, "api_key_set", o.key != "",
		"max_history", o.maxHistory, "timeout", o.timeout)
	if o.key != "" && os.Getenv(keyEnv) != o.key {
		logger.Warn("the API key was given with --openai-key, which other local users can see in ps; set " + keyEnv + " instead")
	}
	if len(mcp.headers.vals) > 0 && !mcp.headers.fromEnv {
		logger.Warn("MCP headers were given with --mcp-header, which other local users can see in ps; set " + envName("mcp-header") + " instead")
	}
	return e, func() { e.Close(); stopTools() }, nil
}
