package httpagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/wal"
)

// Config configures the engine.
type Config struct {
	// URL is the agent endpoint (http or https). Required.
	URL string
	// Secret keys the requests' HMAC-SHA256 signature. Required.
	Secret []byte
	// Timeout bounds one request, its retries and its streamed answer
	// included. Default 2m.
	Timeout time.Duration
	// MaxLine bounds one NDJSON line of an answer. Default 1 MiB.
	MaxLine int
	// BackoffBase and BackoffMax shape the retries' backoff: the n-th
	// wait is random in [0, min(BackoffMax, BackoffBase·2ⁿ)] (full
	// jitter), or Retry-After when the endpoint says. Defaults 100ms, 5s.
	BackoffBase, BackoffMax time.Duration
	// Logger gets a line per retry. Default slog.Default().
	Logger *slog.Logger
}

// Sentinels callers (and tests) may branch on; the errors wrap them.
var (
	// ErrStatus: the endpoint answered with a status that is not retried.
	ErrStatus = errors.New("unexpected HTTP status")
	// ErrBadLine: a line of the answer is not one the protocol has.
	ErrBadLine = errors.New("bad line")
	// ErrNoFinal: the answer ended (or broke) before its final line.
	ErrNoFinal = errors.New("answer ended before its final line")
	// ErrTimeout: the request did not finish within Config.Timeout.
	ErrTimeout = errors.New("no answer within the agent timeout")
)

// toolFailure begins the result of a call whose tool request failed (not
// the tool: the request). The next step sees it and ends the turn, as the
// protocol says of a failed request, without asking the endpoint again.
const toolFailure = "agent error: "

// Agent drives an agent endpoint. It is safe for concurrent use.
type Agent struct {
	cfg       Config
	client    *http.Client
	transport *http.Transport
	closeOnce sync.Once
}

var (
	_ engine.Streamer   = (*Agent)(nil)
	_ engine.CallRunner = (*Agent)(nil)
)

// New checks cfg and returns the engine.
func New(cfg Config) (*Agent, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("httpagent: URL %q is not an http(s) URL such as http://127.0.0.1:9000/agent", cfg.URL)
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("httpagent: a Secret is required: the endpoint checks every request's signature")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = 1 << 20
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 100 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// No cap on connections per host and plenty kept idle: every session's
	// request has its own connection, so one that hangs waits alone.
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &Agent{cfg: cfg, transport: tr, client: &http.Client{Transport: tr}}, nil
}

// Close drops the idle connections. Requests in flight end with their
// contexts. Safe to call more than once.
func (a *Agent) Close() error {
	a.closeOnce.Do(a.transport.CloseIdleConnections)
	return nil
}

// Tool reports no tools: the endpoint declares each with its call, and the
// actor runs calls through RunCall.
func (a *Agent) Tool(string) (engine.Tool, bool) { return engine.Tool{}, false }

// Next is Stream without showing the parts.
func (a *Agent) Next(ctx context.Context, in engine.TurnInput) (engine.Action, error) {
	return a.Stream(ctx, in, func(string) {})
}

// entry is a log entry in a request, shaped as PROTOCOL.md's message.
type entry struct {
	Seq       uint64         `json:"seq"`
	Role      string         `json:"role"`
	Content   string         `json:"content"`
	Timestamp float64        `json:"timestamp"`
	Metadata  map[string]any `json:"metadata"`
}

func entryOf(e wal.Entry) entry {
	md := e.Metadata
	if md == nil {
		md = map[string]any{}
	}
	return entry{Seq: e.Seq, Role: e.Role, Content: e.Content, Timestamp: e.Time, Metadata: md}
}

func entriesOf(es []wal.Entry) []entry {
	out := make([]entry, len(es))
	for i, e := range es {
		out[i] = entryOf(e)
	}
	return out
}

type stepRequest struct {
	Kind         string         `json:"kind"`
	SessionID    string         `json:"session_id"`
	UserID       string         `json:"user_id"`
	User         entry          `json:"user"`
	Steps        []entry        `json:"steps"`
	Step         int            `json:"step"`
	History      []entry        `json:"history"`
	Summary      *string        `json:"summary"`
	Context      map[string]any `json:"context"`
	AgentContext map[string]any `json:"agent_context"`
}

type toolRequest struct {
	Kind      string         `json:"kind"`
	SessionID string         `json:"session_id"`
	UserID    string         `json:"user_id"`
	CallID    string         `json:"call_id"`
	Name      string         `json:"name"`
	Args      map[string]any `json:"args"`
}

// stepsMade is how many step requests of the turn came before this one:
// every one but the last ended in a tool call, and each call's first
// entry (started, or awaiting_approval for a call that needed approval)
// is in the turn's steps. It is read from the log, so a step asked again
// after a crash has the same number, and the same Idempotency-Key.
func stepsMade(steps []wal.Entry) int {
	n := 0
	for _, e := range steps {
		s, _ := e.Metadata[engine.MetaStatus].(string)
		if e.Role != engine.RoleTool {
			continue
		}
		if s == engine.ToolAwaitingApproval || s == engine.ToolStarted && !approvedBefore(steps, e) {
			n++
		}
	}
	return n
}

// approvedBefore reports whether the started entry e follows its call's
// approval (the call was counted at its awaiting_approval entry).
func approvedBefore(steps []wal.Entry, e wal.Entry) bool {
	for _, p := range steps {
		if p.Seq < e.Seq && p.Metadata[engine.MetaCallID] == e.Metadata[engine.MetaCallID] && p.Metadata[engine.MetaStatus] == engine.ToolApproved {
			return true
		}
	}
	return false
}

// Stream asks the endpoint for the next step of the turn and shows its
// text parts as they arrive.
func (a *Agent) Stream(ctx context.Context, in engine.TurnInput, part func(string)) (engine.Action, error) {
	if n := len(in.Steps); n > 0 {
		last := in.Steps[n-1]
		if s, _ := last.Metadata[engine.MetaStatus].(string); last.Role == engine.RoleTool && s == engine.ToolFailed {
			if why, ok := strings.CutPrefix(last.Content, toolFailure); ok {
				name, _ := last.Metadata[engine.MetaName].(string)
				return engine.Action{}, fmt.Errorf("tool request for %s: %s", name, why)
			}
		}
	}
	step := stepsMade(in.Steps)
	req := stepRequest{
		Kind: "step", SessionID: in.SessionID, UserID: in.UserID, User: entryOf(in.User),
		Steps: entriesOf(in.Steps), Step: step, History: entriesOf(in.History),
		Context: in.Context, AgentContext: in.AgentContext,
	}
	if in.Summary != "" {
		req.Summary = &in.Summary
	}
	key := fmt.Sprintf("%s/%d/%d", in.SessionID, in.User.Seq, step)
	var act engine.Action
	var text strings.Builder
	err := a.exchange(ctx, key, req, true, func(l line) (bool, error) {
		switch l.Type {
		case "text":
			if t := l.text(); t != "" {
				text.WriteString(t)
				part(t)
			}
			return false, nil
		case "reply":
			act.Reply, act.AgentContext = text.String(), l.AgentContext
			if l.Text != nil {
				act.Reply = *l.Text
			}
			return true, nil
		case "tool_call":
			if l.Name == "" {
				return false, fmt.Errorf("%w: tool_call without a name", ErrBadLine)
			}
			act.Call = &engine.Call{Name: l.Name, Args: l.Args, Idempotent: l.Idempotent, Sensitive: l.Sensitive, Approval: l.Approval}
			act.AgentContext = l.AgentContext
			return true, nil
		case "error":
			return false, agentSaid(l.Message)
		}
		return false, fmt.Errorf("%w: type %q is not a step's (text, reply, tool_call, error)", ErrBadLine, l.Type)
	})
	if err != nil {
		return engine.Action{}, fmt.Errorf("step request: %w", err)
	}
	return act, nil
}

// RunCall runs a call with a tool request. The endpoint's own error is the
// call's failure; a failed request is logged as toolFailure, which ends
// the turn at its next step.
func (a *Agent) RunCall(ctx context.Context, c engine.CallInput, progress func(string)) (string, error) {
	req := toolRequest{Kind: "tool", SessionID: c.SessionID, UserID: c.UserID, CallID: c.CallID, Name: c.Name, Args: c.Args}
	var result string
	var toolErr error
	err := a.exchange(ctx, c.SessionID+"/"+c.CallID, req, c.Idempotent, func(l line) (bool, error) {
		switch l.Type {
		case "progress":
			progress(l.text())
			return false, nil
		case "result":
			result = l.text()
			return true, nil
		case "error":
			toolErr = errors.New(l.Message)
			if l.Message == "" {
				toolErr = errors.New("the tool failed (no message)")
			}
			return true, nil
		}
		return false, fmt.Errorf("%w: type %q is not a tool's (progress, result, error)", ErrBadLine, l.Type)
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return "", err // cut short: whoever activates the session decides
	case err != nil:
		return "", fmt.Errorf("%stool request: %w", toolFailure, err)
	case toolErr != nil:
		return "", toolErr
	}
	return result, nil
}

// agentSaid is the endpoint's own error line.
func agentSaid(msg string) error {
	if msg == "" {
		msg = "the agent reported an error (no message)"
	}
	return errors.New(msg)
}

// line is one NDJSON line of an answer; which fields count depends on Type.
type line struct {
	Type         string         `json:"type"`
	Text         *string        `json:"text"`
	Message      string         `json:"message"`
	Name         string         `json:"name"`
	Args         map[string]any `json:"args"`
	Idempotent   bool           `json:"idempotent"`
	Sensitive    bool           `json:"sensitive"`
	Approval     bool           `json:"approval"`
	AgentContext map[string]any `json:"agent_context"`
}

func (l line) text() string {
	if l.Text == nil {
		return ""
	}
	return *l.Text
}

// exchange posts body under key and feeds the answer's lines to onLine
// until it says the final line came.
func (a *Agent) exchange(ctx context.Context, key string, body any, replayable bool, onLine func(line) (bool, error)) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, a.cfg.Timeout, fmt.Errorf("%w (%v)", ErrTimeout, a.cfg.Timeout))
	defer cancel()
	resp, err := a.post(ctx, key, b, replayable)
	if err != nil {
		return a.ctxErr(ctx, err)
	}
	defer resp.Body.Close()
	if err := readLines(resp.Body, a.cfg.MaxLine, onLine); err != nil {
		return a.ctxErr(ctx, err)
	}
	return nil
}

// ctxErr says a timeout is a timeout, whatever the transport made of it;
// an error that already says so (with the last failure) is kept.
func (a *Agent) ctxErr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && errors.Is(c, ErrTimeout) && !errors.Is(err, ErrTimeout) {
		return c
	}
	return err
}
