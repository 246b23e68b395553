package mcptools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/engine/llm"
)

// Server is one MCP server to take tools from.
type Server struct {
	// Name stands for the server in logs, in what the model is told, and
	// before its tools' names when they would be ambiguous. Default
	// mcp1, mcp2… by position; at most 32 of a-z A-Z 0-9 _ -.
	Name string
	// URL is the server's streamable HTTP endpoint, e.g.
	// http://127.0.0.1:8000/mcp.
	URL string
	// Header is sent with every request to the server (a bearer token in
	// Authorization, say). It is never logged.
	Header http.Header
}

// Config configures a Set.
type Config struct {
	Servers []Server
	// Reserved are names no MCP tool may take as they are (the engine's
	// own tools): a server's tool named so is offered as SERVER_NAME.
	Reserved []string
	// StartWait bounds how long New waits for the servers' first answers.
	// Default 5s.
	StartWait time.Duration
	// RetryMin and RetryMax bound the wait between attempts to reach a
	// server that does not answer; it doubles after each failed attempt.
	// Defaults 500ms and 30s.
	RetryMin, RetryMax time.Duration
	// ConnectTimeout bounds one attempt: connecting and listing the tools.
	// Default 10s.
	ConnectTimeout time.Duration
	// CallTimeout bounds one tool call. Default 2m.
	CallTimeout time.Duration
	// KeepAlive is how often a connected server is pinged, so that one
	// that went away is noticed (and its tools left out) without waiting
	// for a call. Default 30s; negative: never.
	KeepAlive time.Duration
	// MaxResultBytes bounds a call's result text (longer is cut, saying
	// so): it is journaled and sent to the model. Default 64 KiB.
	MaxResultBytes int
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

var serverNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,32}$`)

func (c *Config) setDefaults() error {
	seen := make(map[string]bool, len(c.Servers))
	for i := range c.Servers {
		s := &c.Servers[i]
		if s.Name == "" {
			s.Name = fmt.Sprintf("mcp%d", i+1)
		}
		if !serverNameRE.MatchString(s.Name) {
			return fmt.Errorf("mcptools: server name %q: want 1-32 of a-z A-Z 0-9 _ -", s.Name)
		}
		if seen[s.Name] {
			return fmt.Errorf("mcptools: two servers are named %q", s.Name)
		}
		seen[s.Name] = true
		if err := CheckURL(s.URL); err != nil {
			return fmt.Errorf("mcptools: server %s: %w", s.Name, err)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.StartWait, 5*time.Second)
	def(&c.RetryMin, 500*time.Millisecond)
	def(&c.RetryMax, 30*time.Second)
	def(&c.ConnectTimeout, 10*time.Second)
	def(&c.CallTimeout, 2*time.Minute)
	switch {
	case c.KeepAlive == 0:
		c.KeepAlive = 30 * time.Second
	case c.KeepAlive < 0:
		c.KeepAlive = 0
	}
	c.RetryMax = max(c.RetryMax, c.RetryMin)
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = 64 << 10
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// CheckURL says what is wrong with an MCP server URL, without repeating
// it (it may hold credentials).
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("the MCP server URL must be an http(s) URL such as http://127.0.0.1:8000/mcp")
	}
	return nil
}

// Set is the tools of a list of MCP servers, kept up to date in the
// background. It is safe for concurrent use.
type Set struct {
	cfg       Config
	log       *slog.Logger
	transport *http.Transport // owned: Close drops its connections
	servers   []*server
	reserved  map[string]bool

	cancel context.CancelFunc
	wg     sync.WaitGroup // the servers' loops

	snap atomic.Pointer[snapshot]
	mu   sync.Mutex // rebuild and seen
	// seen maps every name a tool was offered under to its server, so
	// that a call of a tool no longer offered gets a reason.
	seen      map[string]*server
	closeOnce sync.Once
}

var _ llm.ToolSource = (*Set)(nil)

// snapshot is what is offered at one moment; it is never changed, only
// replaced.
type snapshot struct {
	tools  []llm.Tool
	byName map[string]llm.Tool
	note   string
}

// New checks cfg, starts keeping the servers' tools, and waits until each
// server has answered or failed once, or StartWait or ctx ended (ctx
// bounds only that wait). A server that cannot be reached is no error.
// Close stops it all.
func New(ctx context.Context, cfg Config) (*Set, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	s := &Set{
		cfg: cfg, log: cfg.Logger, transport: tr,
		reserved: make(map[string]bool, len(cfg.Reserved)), seen: make(map[string]*server),
	}
	for _, r := range cfg.Reserved {
		s.reserved[r] = true
	}
	s.snap.Store(&snapshot{})
	for _, sc := range cfg.Servers {
		s.servers = append(s.servers, newServer(s, sc))
	}
	s.rebuild()
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, srv := range s.servers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			srv.run(runCtx)
		}()
	}
	wait := time.NewTimer(cfg.StartWait)
	defer wait.Stop()
	for _, srv := range s.servers {
		select {
		case <-srv.tried:
		case <-wait.C:
			return s, nil
		case <-ctx.Done():
			return s, nil
		}
	}
	return s, nil
}

// Close stops the background work and closes the servers' sessions. Safe
// to call twice.
func (s *Set) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.transport.CloseIdleConnections()
	})
	return nil
}

// OpenAITools returns the tools offered now, and the note for the model
// naming the servers that cannot be reached.
func (s *Set) OpenAITools() ([]llm.Tool, string) {
	sn := s.snap.Load()
	return sn.tools, sn.note
}

// OpenAITool returns the named tool. A name offered earlier but not now
// is still known: its run fails with the reason (its server cannot be
// reached, or no longer offers it).
func (s *Set) OpenAITool(name string) (llm.Tool, bool) {
	if t, ok := s.snap.Load().byName[name]; ok {
		return t, true
	}
	s.mu.Lock()
	srv, ok := s.seen[name]
	s.mu.Unlock()
	if !ok {
		return llm.Tool{}, false
	}
	return llm.Tool{Tool: engine.Tool{Name: name, Run: func(context.Context, map[string]any, func(string)) (string, error) {
		if !srv.state().up {
			return "", srv.unavailable()
		}
		return "", fmt.Errorf("MCP server %s no longer offers the tool %s", srv.cfg.Name, name)
	}}}, true
}

// rebuild makes the snapshot from the servers' states: called whenever
// one changes.
func (s *Set) rebuild() {
	s.mu.Lock()
	defer s.mu.Unlock()
	type cand struct {
		srv  *server
		tool *mcp.Tool
		base string
	}
	var (
		cands []cand
		down  []string
		count = make(map[string]int)
	)
	for _, srv := range s.servers {
		st := srv.state()
		if !st.up {
			down = append(down, srv.cfg.Name)
			continue
		}
		for _, t := range st.tools {
			b := validName(t.Name)
			count[b]++
			cands = append(cands, cand{srv, t, b})
		}
	}
	taken := make(map[string]bool, len(cands)+len(s.reserved))
	for r := range s.reserved {
		taken[r] = true
	}
	sn := &snapshot{byName: make(map[string]llm.Tool, len(cands))}
	for _, c := range cands {
		name := c.base
		if count[name] > 1 || taken[name] {
			name = validName(c.srv.cfg.Name + "_" + c.base)
		}
		full := validName(c.srv.cfg.Name + "_" + c.base)
		for i := 2; taken[name]; i++ {
			suffix := fmt.Sprintf("_%d", i)
			name = full[:min(len(full), 64-len(suffix))] + suffix
		}
		taken[name] = true
		t := c.srv.openAITool(name, c.tool)
		sn.tools = append(sn.tools, t)
		sn.byName[name] = t
		s.seen[name] = c.srv
	}
	if len(down) > 0 {
		sort.Strings(down)
		sn.note = fmt.Sprintf("These MCP tool servers cannot be reached right now, so their tools are not offered to you: %s. "+
			"If the user needs what they would do, say it is unavailable for now.", strings.Join(down, ", "))
	}
	s.snap.Store(sn)
}

var nonName = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// validName is name as OpenAI accepts a function name: other characters
// become _, and it is cut to 64.
func validName(name string) string {
	n := nonName.ReplaceAllString(name, "_")
	if n == "" {
		n = "tool"
	}
	return n[:min(len(n), 64)]
}
