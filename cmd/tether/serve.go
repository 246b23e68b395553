package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/wal"
)

// serveConfig is everything `tether serve` is told, after flags and
// environment are read.
type serveConfig struct {
	listen, data, nodeID, gossip, join, clusterSecret string
	replicas                                          int
	window, retention, helloTimeout, reauthMaxAge     time.Duration
	idleTimeout                                       time.Duration
	replayLimit, maxContent                           int
	maxFrame                                          int64
	rate                                              float64
	jwtSecret, agent, logLevel                        string
	devTokens                                         bool
	demo                                              actor.DemoConfig
}

func (m *Main) parseServe(args []string) (serveConfig, error) {
	var c serveConfig
	fs := m.newFlags("serve")
	fs.StringVar(&c.listen, "listen", env("TETHER_LISTEN", "127.0.0.1:8080"), "HTTP + WebSocket address [TETHER_LISTEN]")
	fs.StringVar(&c.data, "data", env("TETHER_DATA", "./data"), "Pebble directory [TETHER_DATA]")
	fs.StringVar(&c.nodeID, "node-id", "", "unique node name (default: host:port of --listen)")
	fs.StringVar(&c.gossip, "gossip", env("TETHER_GOSSIP", "127.0.0.1:7946"), "memberlist bind address [TETHER_GOSSIP] (cluster: not yet built)")
	fs.StringVar(&c.join, "join", env("TETHER_JOIN", ""), "seed nodes to join [TETHER_JOIN] (cluster: not yet built)")
	replicas, err := strconv.Atoi(env("TETHER_REPLICAS", "2"))
	if err != nil {
		return c, fmt.Errorf("TETHER_REPLICAS: %w", err)
	}
	fs.IntVar(&c.replicas, "replicas", replicas, "copies of each entry in a cluster [TETHER_REPLICAS]")
	durFlag(fs, &c.window, "window", "TETHER_WINDOW", 5*time.Minute, "reconnect window")
	durFlag(fs, &c.retention, "retention", "TETHER_RETENTION", time.Hour, "keep expired/completed sessions this long")
	fs.IntVar(&c.replayLimit, "replay-limit", 50, "entries in one resume batch")
	fs.DurationVar(&c.helloTimeout, "hello-timeout", 10*time.Second, "time allowed for the first frame")
	fs.Int64Var(&c.maxFrame, "max-frame", 65536, "bytes per client message")
	fs.IntVar(&c.maxContent, "max-content", 32768, "bytes of one send's content")
	fs.DurationVar(&c.reauthMaxAge, "reauth-max-age", 5*time.Minute, "auth_time age accepted for sensitive sessions")
	fs.StringVar(&c.jwtSecret, "jwt-secret", env("TETHER_JWT_SECRET", ""), "HS256 secret [TETHER_JWT_SECRET]")
	fs.StringVar(&c.clusterSecret, "cluster-secret", env("TETHER_CLUSTER_SECRET", ""), "gossip encryption + node-link auth [TETHER_CLUSTER_SECRET]")
	fs.Float64Var(&c.rate, "rate", 50, "sends per second per connection, bursts of 2x (0: no limit)")
	fs.StringVar(&c.agent, "agent", env("TETHER_AGENT", "echo"), "agent engine: echo|demo|openai [TETHER_AGENT]")
	fs.BoolVar(&c.devTokens, "dev-tokens", false, "enable POST /dev/token")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 2*time.Minute, "passivate a session actor with no client and no work after this long")
	fs.DurationVar(&c.demo.SearchDelay, "demo-search-delay", 3*time.Second, "how long the demo engine's search tool takes")
	fs.BoolVar(&c.demo.SearchIdempotent, "demo-search-idempotent", false, "declare the demo search tool idempotent (re-run after a crash instead of failing)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug|info|warn|error")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case c.window <= 0 || c.retention <= 0 || c.helloTimeout <= 0 || c.reauthMaxAge <= 0 || c.idleTimeout <= 0:
		return c, errors.New("serve: durations must be positive")
	case c.replayLimit < 1 || c.maxFrame < 256 || c.maxContent < 1 || c.rate < 0 || c.replicas < 1:
		return c, errors.New("serve: --replay-limit, --max-content and --replicas must be ≥ 1, --max-frame ≥ 256, --rate ≥ 0")
	case c.agent != "echo" && c.agent != "demo" && c.agent != "openai":
		return c, fmt.Errorf("serve: unknown --agent %q (echo|demo|openai)", c.agent)
	case c.agent == "openai":
		return c, errors.New("serve: the openai engine is not built yet; use echo or demo")
	}
	if c.clusterSecret == "" && !loopback(c.gossip) {
		return c, fmt.Errorf("serve: --gossip %s is not a loopback address: set --cluster-secret (or TETHER_CLUSTER_SECRET)", c.gossip)
	}
	if c.nodeID == "" {
		c.nodeID = c.listen
	}
	return c, nil
}

// loopback reports whether addr (host:port) names a loopback host.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func durFlag(fs interface {
	DurationVar(*time.Duration, string, time.Duration, string)
}, p *time.Duration, name, envName string, def time.Duration, usage string) {
	if v, ok := os.LookupEnv(envName); ok {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		}
	}
	fs.DurationVar(p, name, def, fmt.Sprintf("%s [%s]", usage, envName))
}

func (m *Main) serve(ctx context.Context, args []string) error {
	c, err := m.parseServe(args)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: parseLevel(c.logLevel)}))
	if c.join != "" {
		logger.Warn("clustering is not built yet: --join is ignored and this node runs alone", "join", c.join)
	}
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return fmt.Errorf("serve: data directory: %w", err)
	}
	secret, err := jwtSecret(c)
	if err != nil {
		return err
	}
	metrics := gateway.NewMetrics()
	// The registry runs the retention sweep, after its boot recovery.
	log, err := wal.New(wal.Config{Dir: c.data, Retention: c.retention, SweepInterval: -1, OnCommit: metrics.ObserveCommit, Logger: logger})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer log.Close()
	var engine actor.Engine = actor.Echo{}
	if c.agent == "demo" {
		engine = actor.NewDemo(c.demo)
	}
	reg, err := actor.New(actor.Config{
		Journal: log, Engine: engine, Window: c.window, ReplayLimit: c.replayLimit,
		IdleTimeout: c.idleTimeout, ReauthMaxAge: c.reauthMaxAge, Logger: logger,
		SweepInterval: min(max(c.retention/4, 100*time.Millisecond), time.Minute),
	})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer reg.Close()
	metrics.Watch(log.Stats, reg.Stats)
	var draining atomic.Bool
	ready := func() error {
		if draining.Load() {
			return errors.New("shutting down")
		}
		_, _, err := log.LastAlive() // the store answers reads
		return err
	}
	srv, err := gateway.New(gateway.Config{
		Backend: gateway.Local(reg), Secret: secret, DevTokens: c.devTokens, Ready: ready,
		HelloTimeout: c.helloTimeout, MaxFrame: c.maxFrame, MaxContent: c.maxContent,
		Rate: c.rate, NoRateLimit: c.rate == 0, Metrics: metrics, Logger: logger,
	})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if c.nodeID == "" || strings.HasSuffix(c.nodeID, ":0") {
		c.nodeID = ln.Addr().String()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("listening", "addr", ln.Addr().String(), "node", c.nodeID, "agent", c.agent)

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "node", c.nodeID)
	draining.Store(true)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	// Actors close their clients with 1012 and keep their state in the log.
	if err := reg.Close(); err != nil {
		logger.Error("close sessions", "err", err)
	}
	_ = srv.Close()
	if err := log.Close(); err != nil {
		return fmt.Errorf("serve: close log: %w", err)
	}
	logger.Info("stopped", "node", c.nodeID)
	return nil
}

// jwtSecret is --jwt-secret, or with --dev-tokens a random secret kept in
// the data directory so tokens survive a restart.
func jwtSecret(c serveConfig) ([]byte, error) {
	if c.jwtSecret != "" {
		return []byte(c.jwtSecret), nil
	}
	if !c.devTokens {
		return nil, errors.New("serve: set --jwt-secret or TETHER_JWT_SECRET (or use --dev-tokens for a local random one)")
	}
	path := filepath.Join(c.data, "dev-jwt-secret")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return b, nil
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return nil, err
	}
	secret := []byte(hex.EncodeToString(buf))
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		return nil, fmt.Errorf("serve: keep dev secret: %w", err)
	}
	return secret, nil
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}
