package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tether-dev/tether/actor/engine"
)

// Config configures the openai engine.
type Config struct {
	// BaseURL is the OpenAI-compatible API, up to and including its
	// version path: http://127.0.0.1:8080/v1 for llama.cpp's
	// llama-server, http://127.0.0.1:11434/v1 for Ollama,
	// https://api.openai.com/v1 for OpenAI. Required.
	BaseURL string
	// Model is the model name sent with every request. Required.
	Model string
	// APIKey is sent as the bearer token; empty sends none (local servers
	// need none). It is never logged and never part of an error message.
	APIKey string
	// System is the system prompt. Default DefaultOpenAISystem.
	System string
	// MaxHistoryBytes bounds the earlier entries (TurnInput.History) sent
	// with a request: the newest that fit are sent, and the summary of
	// what is left out stands in for the rest. The user entry and this
	// turn's tool steps are always sent. Default 16000.
	MaxHistoryBytes int
	// Timeout bounds one request attempt, from sending it to the last
	// chunk of the streamed reply. Default 2m.
	Timeout time.Duration
	// MaxRetries is how often a request is sent again when the server
	// answers 408, 409, 429 or 5xx or the connection fails before an
	// answer, with exponential backoff, honouring Retry-After. A reply
	// cut off mid-stream is never retried: its parts were shown. Default
	// 2; negative: no retries.
	MaxRetries int
	// MaxRetryDelay caps the wait between retries; a Retry-After asking
	// for longer ends the retries at once (the user sees the rate limit
	// instead of a turn that hangs). Default 30s.
	MaxRetryDelay time.Duration
	// Tools are offered to the model. nil: BuiltinTools with its
	// defaults; an empty non-nil slice offers none.
	Tools []Tool
	// ToolSource offers further tools, read at every step: MCP servers'.
	// A tool of the source named like one of Tools is left out. nil: none.
	ToolSource ToolSource
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// DefaultOpenAISystem is the system prompt the openai engine uses when
// none is configured.
const DefaultOpenAISystem = "You are a helpful assistant. Answer concisely. " +
	"Use the tools you are given when they help; after a tool result, answer the user in plain text."

// Errors of the openai engine that callers may branch on; each reaches
// the user as the text of an "agent error" entry.
var (
	// ErrStreamCut: the reply stream ended without the model finishing
	// (no finish_reason): the parts shown are not the whole reply.
	ErrStreamCut = errors.New("the model's reply stream ended before the reply was finished")
	// ErrEmptyReply: the model finished without text or a tool call.
	ErrEmptyReply = errors.New("the model returned an empty reply")
	// ErrBadToolCall: the model asked for a tool call that cannot be made
	// (no name, or arguments that are not a JSON object).
	ErrBadToolCall = errors.New("the model asked for a malformed tool call")
)

// Engine is an engine backed by any OpenAI-compatible chat-completions
// endpoint. It streams replies and calls tools; it keeps no session
// state, building each request from TurnInput.
type Engine struct {
	cfg       Config
	log       *slog.Logger
	transport *http.Transport // owned: Close drops its idle connections
	chat      openai.ChatCompletionService
	tools     map[string]Tool
	toolDefs  []openai.ChatCompletionToolUnionParam
	closeOnce sync.Once
}

var _ engine.Streamer = (*Engine)(nil)

// New checks cfg and returns the engine. It sends nothing until the
// first turn.
func New(cfg Config) (*Engine, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	tools, defs, err := toolParams(cfg.Tools)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	o := &Engine{cfg: cfg, log: cfg.Logger, transport: tr, tools: tools, toolDefs: defs}
	// openai.NewClient would also read OPENAI_* from the environment;
	// Tether's configuration is only what it is given.
	o.chat = openai.NewChatCompletionService(
		option.WithHTTPClient(&http.Client{Transport: tr}),
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(cfg.MaxRetries),
		option.WithMaxRetryDelay(cfg.MaxRetryDelay),
		option.WithRequestTimeout(cfg.Timeout),
		option.WithMiddleware(o.logAttempt),
	)
	return o, nil
}

func (c *Config) setDefaults() error {
	if c.Model == "" {
		return errors.New("actor: Config.Model is required")
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL itself is left out: it may hold credentials.
		return errors.New("actor: Config.BaseURL must be an http(s) URL such as http://127.0.0.1:11434/v1")
	}
	if c.System == "" {
		c.System = DefaultOpenAISystem
	}
	if c.MaxHistoryBytes <= 0 {
		c.MaxHistoryBytes = 16000
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
	switch {
	case c.MaxRetries == 0:
		c.MaxRetries = 2
	case c.MaxRetries < 0:
		c.MaxRetries = 0
	}
	if c.MaxRetryDelay <= 0 {
		c.MaxRetryDelay = 30 * time.Second
	}
	if c.Tools == nil {
		c.Tools = BuiltinTools(BuiltinToolsConfig{})
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Close drops the engine's idle connections. Safe to call twice; a turn
// still running finishes on its own connection.
func (o *Engine) Close() error {
	o.closeOnce.Do(o.transport.CloseIdleConnections)
	return nil
}

// Tool returns one of the tools offered to the model.
func (o *Engine) Tool(name string) (engine.Tool, bool) {
	if t, ok := o.tools[name]; ok {
		return t.Tool, true
	}
	if o.cfg.ToolSource != nil {
		if t, ok := o.cfg.ToolSource.OpenAITool(name); ok && t.Run != nil {
			return t.Tool, true
		}
	}
	return engine.Tool{}, false
}

// Next is Stream without showing the parts.
func (o *Engine) Next(ctx context.Context, in engine.TurnInput) (engine.Action, error) {
	return o.Stream(ctx, in, func(string) {})
}

// Stream asks the model for the next step of the turn, reporting the
// reply's text as it arrives.
func (o *Engine) Stream(ctx context.Context, in engine.TurnInput, part func(string)) (engine.Action, error) {
	defs, note := o.toolDefs, ""
	if o.cfg.ToolSource != nil {
		var more []openai.ChatCompletionToolUnionParam
		more, note = o.sourceTools()
		// Clipped: steps run concurrently and share o.toolDefs.
		defs = append(slices.Clip(defs), more...)
	}
	msgs, kept := o.conversation(in, note)
	params := openai.ChatCompletionNewParams{Model: o.cfg.Model, Messages: msgs}
	// parallel_tool_calls is not sent: some servers and models refuse it.
	// When a model asks for several calls, the first runs; the model sees
	// its result and asks again for what it still needs.
	if len(defs) > 0 {
		params.Tools = defs // an empty list is refused by some servers
	}
	start := time.Now()
	attempts := new(int)
	act, err := o.stream(context.WithValue(ctx, attemptsKey{}, attempts), params, part)
	if err != nil {
		err = o.explain(ctx, err, *attempts)
		o.log.Warn("model request failed", "session", in.SessionID, "model", o.cfg.Model,
			"took", time.Since(start).Round(time.Millisecond), "err", err)
		return engine.Action{}, err
	}
	if c := act.Call; c != nil {
		// The call carries its tool's declaration, so that it is kept
		// with the pending call: after a crash the tool's source may not
		// offer it (yet), and the call is still known to be idempotent.
		if t, ok := o.Tool(c.Name); ok {
			c.Idempotent, c.Sensitive, c.Approval = t.Idempotent, t.Sensitive, t.Approval
		}
	}
	o.log.Debug("model step", "session", in.SessionID, "model", o.cfg.Model, "messages", len(msgs),
		"history_kept", kept, "history", len(in.History), "tool_call", act.Call != nil,
		"took", time.Since(start).Round(time.Millisecond))
	return act, nil
}

// stream runs one streamed request: text parts go to part as they come,
// and the step is decided once the model says it has finished.
func (o *Engine) stream(ctx context.Context, params openai.ChatCompletionNewParams, part func(string)) (engine.Action, error) {
	s := o.chat.NewStreaming(ctx, params)
	defer s.Close()
	var (
		acc    openai.ChatCompletionAccumulator
		text   strings.Builder
		finish string
	)
	for s.Next() {
		chunk := s.Current()
		if !acc.AddChunk(chunk) {
			return engine.Action{}, errors.New("the model sent a malformed stream chunk")
		}
		for _, c := range chunk.Choices {
			if c.Index != 0 {
				continue // one choice is asked for
			}
			for _, t := range [...]string{c.Delta.Content, c.Delta.Refusal} {
				if t != "" {
					text.WriteString(t)
					part(t)
				}
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := s.Err(); err != nil {
		return engine.Action{}, err
	}
	if finish == "" {
		return engine.Action{}, ErrStreamCut
	}
	if len(acc.Choices) > 0 {
		if calls := acc.Choices[0].Message.ToolCalls; len(calls) > 0 {
			if len(calls) > 1 {
				o.log.Debug("model asked for several tool calls; running the first", "calls", len(calls))
			}
			call, err := toolCall(calls[0].Function.Name, calls[0].Function.Arguments)
			if err != nil {
				return engine.Action{}, err
			}
			return engine.Action{Call: call}, nil
		}
	}
	if text.Len() == 0 {
		return engine.Action{}, fmt.Errorf("%w (finish reason %q)", ErrEmptyReply, finish)
	}
	return engine.Action{Reply: text.String()}, nil
}

// explain turns a failed request into what the user is told: what went
// wrong in words, never the API key.
func (o *Engine) explain(ctx context.Context, err error, attempts int) error {
	var apiErr *openai.Error
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("model request stopped: %w", err)
	case errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("the model did not finish within %s: %w", o.cfg.Timeout, err)
	case errors.As(err, &apiErr):
		msg := fmt.Sprintf("the model server answered %d %s", apiErr.StatusCode, http.StatusText(apiErr.StatusCode))
		if attempts > 1 {
			msg += fmt.Sprintf(" (%d attempts)", attempts)
		}
		if ra := retryAfter(apiErr); ra != "" {
			msg += " (retry after " + ra + ")"
		}
		if apiErr.Message != "" {
			msg += ": " + engine.Clip(apiErr.Message, 300)
		}
		err = &msgError{msg: msg, err: err}
	case errors.Is(err, ErrStreamCut) || errors.Is(err, ErrEmptyReply) || errors.Is(err, ErrBadToolCall):
	default:
		err = fmt.Errorf("model request: %w", err)
	}
	return redact(err, o.cfg.APIKey)
}

// attemptsKey is the context key of a request's attempt counter (an
// *int): the SDK makes the attempts of one request one after another, on
// the caller's goroutine.
type attemptsKey struct{}

// logAttempt counts and logs each HTTP attempt (retries included), by
// status only: headers carry the key.
func (o *Engine) logAttempt(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	if n, ok := req.Context().Value(attemptsKey{}).(*int); ok {
		*n++
	}
	res, err := next(req)
	attempt := req.Header.Get("X-Stainless-Retry-Count")
	switch {
	case err != nil:
		o.log.Debug("model attempt failed", "attempt", attempt, "err", redact(err, o.cfg.APIKey))
	case res.StatusCode >= 400:
		o.log.Info("model attempt refused", "attempt", attempt, "status", res.StatusCode,
			"retry_after", res.Header.Get("Retry-After"))
	default:
		o.log.Debug("model attempt", "attempt", attempt, "status", res.StatusCode)
	}
	return res, err
}

// retryAfter is what a refusal asked for, if it did.
func retryAfter(e *openai.Error) string {
	if e.Response == nil {
		return ""
	}
	if v := e.Response.Header.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil {
			return (time.Duration(s) * time.Second).String()
		}
		return engine.Clip(v, 40)
	}
	return ""
}

// msgError is an error with a message of its own (one that says it
// better, or one with a secret taken out); errors.Is and As still see the
// error it wraps.
type msgError struct {
	msg string
	err error
}

func (e *msgError) Error() string { return e.msg }
func (e *msgError) Unwrap() error { return e.err }

func redact(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &msgError{msg: strings.ReplaceAll(err.Error(), secret, "[redacted]"), err: err}
}
