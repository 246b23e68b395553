package mcptools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// server keeps one MCP server's session and tools: its loop (run)
// connects, lists, relists on list_changed, and reconnects with backoff
// when the server cannot be reached.
type server struct {
	set    *Set
	cfg    Server
	log    *slog.Logger
	client *mcp.Client
	http   *http.Client
	// changed: the server said its tools changed (coalesced).
	changed chan struct{}
	// broken: a call found this session's server gone.
	broken chan *mcp.ClientSession
	// tried is closed once the first attempt to reach the server ended.
	tried chan struct{}

	mu sync.Mutex
	st serverState
	cs *mcp.ClientSession // the live session; nil while down
	// progress routes the server's progress notifications to the call
	// whose token they carry; calls counts the tokens handed out.
	progress map[string]func(string)
	calls    uint64
}

// serverState is what the Set offers of a server.
type serverState struct {
	up    bool
	tools []*mcp.Tool
	err   error // why it is down; nil before the first attempt
}

func newServer(set *Set, cfg Server) *server {
	s := &server{
		set: set, cfg: cfg,
		log:     set.log.With("mcp_server", cfg.Name, "url", redacted(cfg.URL)),
		changed: make(chan struct{}, 1), broken: make(chan *mcp.ClientSession, 1), tried: make(chan struct{}),
		progress: make(map[string]func(string)),
	}
	var rt http.RoundTripper = set.transport
	if len(cfg.Header) > 0 {
		rt = headerTransport{base: rt, header: cfg.Header.Clone()}
	}
	// No client timeout: the server's notifications come on a request
	// that stays open. Each request is bounded by its context instead.
	s.http = &http.Client{Transport: rt}
	opts := &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.changed <- struct{}{}:
			default: // a relist is already due
			}
		},
		ProgressNotificationHandler: s.onProgress,
		KeepAlive:                   set.cfg.KeepAlive,
		// Tether declares no client features: no roots, no sampling.
		Capabilities: &mcp.ClientCapabilities{},
	}
	s.client = mcp.NewClient(&mcp.Implementation{Name: "tether", Version: "1"}, opts)
	return s
}

func (s *server) state() serverState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// run keeps the server's tools until ctx ends.
func (s *server) run(ctx context.Context) {
	cfg := s.set.cfg
	delay := cfg.RetryMin
	first := true
	tried := func() {
		if first {
			first = false
			close(s.tried)
		}
	}
	defer tried()
	for ctx.Err() == nil {
		cs, tools, err := s.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.down(err, delay)
			tried()
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			delay = min(delay*2, cfg.RetryMax)
			continue
		}
		delay = cfg.RetryMin
		s.up(cs, tools, "MCP server connected")
		tried()
		err = s.watch(ctx, cs)
		if ctx.Err() != nil {
			return
		}
		s.down(err, 0)
	}
}

// connect opens a session and lists the tools.
func (s *server) connect(ctx context.Context) (*mcp.ClientSession, []*mcp.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.set.cfg.ConnectTimeout)
	defer cancel()
	cs, err := s.client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.http}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	tools, err := listTools(ctx, cs)
	if err != nil {
		_ = cs.Close()
		return nil, nil, err
	}
	return cs, tools, nil
}

// listTools lists every page of the session's tools; a server without
// the tools capability has none.
func listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	tools := []*mcp.Tool{}
	if ir := cs.InitializeResult(); ir == nil || ir.Capabilities == nil || ir.Capabilities.Tools == nil {
		return tools, nil
	}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// watch serves a live session: it relists on list_changed, and returns
// (having closed the session) when the session ends, a call found the
// server gone, a relist fails, or ctx ends.
func (s *server) watch(ctx context.Context, cs *mcp.ClientSession) error {
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }() // returns once cs is closed, by either side
	err := s.serve(ctx, cs, ended)
	s.mu.Lock()
	s.cs = nil
	s.mu.Unlock()
	_ = cs.Close()
	if !errors.Is(err, errEnded) {
		<-ended
	}
	return err
}

var errEnded = errors.New("the connection ended")

func (s *server) serve(ctx context.Context, cs *mcp.ClientSession, ended <-chan error) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-ended:
			return fmt.Errorf("%w: %v", errEnded, err)
		case b := <-s.broken:
			if b == cs {
				return errors.New("a tool call found the server gone")
			}
		case <-s.changed:
			lctx, cancel := context.WithTimeout(ctx, s.set.cfg.ConnectTimeout)
			tools, err := listTools(lctx, cs)
			cancel()
			if err != nil {
				return err
			}
			s.up(cs, tools, "MCP tools changed")
		}
	}
}

func (s *server) up(cs *mcp.ClientSession, tools []*mcp.Tool, msg string) {
	s.mu.Lock()
	s.st, s.cs = serverState{up: true, tools: tools}, cs
	s.mu.Unlock()
	s.set.rebuild()
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	s.log.Info(msg, "tools", strings.Join(names, ","))
}

// down marks the server unreachable; retry is when it is tried again (0:
// at once).
func (s *server) down(err error, retry time.Duration) {
	s.mu.Lock()
	news := s.st.up || s.st.err == nil // a change, not one more failed attempt
	s.st, s.cs = serverState{err: err}, nil
	s.mu.Unlock()
	s.set.rebuild()
	err = s.clean(err)
	if news {
		s.log.Warn("MCP server unavailable: its tools are not offered until it answers", "err", err, "retry_in", retry)
		return
	}
	s.log.Debug("MCP server still unavailable", "err", err, "retry_in", retry)
}

// unavailable is the error of a call while the server cannot be reached.
func (s *server) unavailable() error {
	return fmt.Errorf("MCP server %s is unavailable: %v", s.cfg.Name, s.clean(s.state().err))
}

// onProgress hands a progress notification to its call, which keeps it
// as the pending call's partial result (shown in session snapshots).
func (s *server) onProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p := req.Params
	tok, _ := p.ProgressToken.(string)
	s.mu.Lock()
	f := s.progress[tok]
	s.mu.Unlock()
	if f == nil {
		return // a call that ended, or a token not ours
	}
	msg := p.Message
	switch {
	case msg != "":
	case p.Total > 0:
		msg = fmt.Sprintf("%g of %g", p.Progress, p.Total)
	default:
		msg = fmt.Sprintf("%g", p.Progress)
	}
	f(msg)
}

// call runs a tool on the server; the server's progress notifications
// for it go to progress.
func (s *server) call(ctx context.Context, tool string, args map[string]any, progress func(string)) (string, error) {
	s.mu.Lock()
	cs := s.cs
	s.calls++
	tok := fmt.Sprintf("tether-%d", s.calls)
	if progress != nil {
		s.progress[tok] = progress
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.progress, tok)
		s.mu.Unlock()
	}()
	if cs == nil {
		return "", s.unavailable()
	}
	timeout := s.set.cfg.CallTimeout
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	if progress != nil {
		params.SetProgressToken(tok)
	}
	res, err := cs.CallTool(cctx, params)
	if err != nil {
		if ctx.Err() != nil {
			return "", err // cut short by the actor, which decides what it was
		}
		why := s.clean(err).Error()
		if cctx.Err() != nil {
			why = fmt.Sprintf("no answer within %s", timeout)
		}
		// A live server's error (an unknown tool, bad arguments) is the
		// call's failure; a server that is gone has its tools left out
		// until it is back.
		if !alive(ctx, cs) {
			select {
			case s.broken <- cs:
			default:
			}
			return "", fmt.Errorf("MCP server %s is unavailable: %s", s.cfg.Name, why)
		}
		return "", fmt.Errorf("MCP server %s: %s: %s", s.cfg.Name, tool, why)
	}
	text := resultText(res, s.set.cfg.MaxResultBytes)
	if res.IsError {
		if text == "" {
			text = fmt.Sprintf("the MCP tool %s reported an error", tool)
		}
		return "", errors.New(text)
	}
	return text, nil
}

// alive reports whether the server answers a ping: an error the server
// sent back counts as an answer.
func alive(ctx context.Context, cs *mcp.ClientSession) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := cs.Ping(ctx, nil)
	var werr *jsonrpc.Error
	return err == nil || errors.As(err, &werr) && werr.Code != rejectedByTransport && ctx.Err() == nil
}

// rejectedByTransport is the code the SDK gives a request it could not
// send (jsonrpc2.ErrRejected, internal to the SDK).
const rejectedByTransport = -32005

// clean takes the URL's credentials, if it has any, out of err's text
// (the SDK's errors quote the URL).
func (s *server) clean(err error) error {
	if err == nil {
		return errors.New("not reached yet")
	}
	if r := redacted(s.cfg.URL); r != s.cfg.URL && strings.Contains(err.Error(), s.cfg.URL) {
		return errors.New(strings.ReplaceAll(err.Error(), s.cfg.URL, r))
	}
	return err
}

func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	base   http.RoundTripper
	header http.Header
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change its request
	for k, v := range t.header {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}
