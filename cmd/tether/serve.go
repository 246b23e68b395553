package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node"
)

// serveConfig is everything `tether serve` is told, after flags and
// environment are read.
type serveConfig struct {
	listen, data, nodeID, gossip, join, clusterSecret string
	advertise, gossipTiming                           string
	gossipSet                                         bool
	replicas, bootstrapExpect                         int
	window, retention, helloTimeout, reauthMaxAge     time.Duration
	idleTimeout, flushInterval, hibernateAfter        time.Duration
	memoryReturn                                      time.Duration
	replayLimit, maxContent, maxContext, maxTurns     int
	maxSessions, tailBytes, maxQueue                  int
	maxFrame                                          int64
	rate                                              float64
	jwtSecret, agent, logLevel, logFormat, origins    string
	pprof, tlsCert, tlsKey                            string
	linkCert, linkKey, linkCA                         string
	devTokens, devTokensAnywhere                      bool
	demo                                              engine.DemoConfig
	openai                                            openaiFlags
	mcp                                               mcpFlags
	agentHTTP                                         agentFlags
}

func (m *Main) parseServe(args []string) (serveConfig, error) {
	var c serveConfig
	fs := m.serveFlags(&c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	_, c.gossipSet = os.LookupEnv("TETHER_GOSSIP")
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "gossip" {
			c.gossipSet = true
		}
	})
	return c, c.check()
}

// serveFlags is serve's flag set, bound to c (the deploy manifests' test
// checks their flags and environment variables against it).
func (m *Main) serveFlags(c *serveConfig) *flags {
	fs := m.newFlags("serve")
	str := func(p *string, name, def, usage string) {
		fs.StringVar(p, name, def, usage)
		fs.bind(name, envName(name))
	}
	dur := func(p *time.Duration, name string, def time.Duration, usage string) {
		fs.DurationVar(p, name, def, usage)
		fs.bind(name, envName(name))
	}
	num := func(p *int, name string, def int, usage string) {
		fs.IntVar(p, name, def, usage)
		fs.bind(name, envName(name))
	}
	str(&c.listen, "listen", "127.0.0.1:8080", "HTTP + WebSocket address")
	str(&c.data, "data", "./data", "Pebble directory")
	str(&c.nodeID, "node-id", "", "unique node name (default: host:port of --listen)")
	str(&c.gossip, "gossip", "127.0.0.1:7946", "memberlist bind address")
	str(&c.join, "join", "", "seed nodes to join: their --gossip addresses, comma-separated host:port (host names allowed)")
	str(&c.advertise, "advertise", "", "host:port other nodes reach this node's HTTP server at (default: --listen)")
	str(&c.gossipTiming, "gossip-timing", "lan", "failure detection preset: lan (a dead node noticed in ~5 s), local, or test (~1 s)")
	num(&c.replicas, "replicas", 2, "copies of each entry in a cluster: an entry is acknowledged once all of them stored it")
	num(&c.bootstrapExpect, "bootstrap-expect", 0, "nodes that form a new cluster's Raft group together (0: 1 without --join, else join an existing group); ignored once the node has Raft state")
	dur(&c.window, "window", 5*time.Minute, "reconnect window")
	dur(&c.retention, "retention", time.Hour, "keep expired/completed sessions this long after their last activity")
	num(&c.replayLimit, "replay-limit", 50, "entries in one resume batch")
	dur(&c.helloTimeout, "hello-timeout", 10*time.Second, "time allowed for the first frame")
	fs.Int64Var(&c.maxFrame, "max-frame", 65536, "bytes per client message")
	fs.bind("max-frame", envName("max-frame"))
	num(&c.maxContent, "max-content", 32768, "bytes of one send's content")
	num(&c.maxContext, "max-context", 64<<10, "bytes of a session's user context")
	num(&c.maxTurns, "max-turns", 64, "user messages waiting for the agent in one session")
	num(&c.maxSessions, "max-sessions-per-user", 100, "live sessions per user on this node (-1: no limit)")
	num(&c.tailBytes, "tail-bytes", 256<<10, "bytes of newest entries an active session keeps in memory")
	num(&c.maxQueue, "max-queue-bytes", 4<<20, "bytes waiting to be written to one client before it is closed (1013)")
	dur(&c.reauthMaxAge, "reauth-max-age", 5*time.Minute, "auth_time age accepted for sensitive sessions")
	str(&c.jwtSecret, "jwt-secret", "", "HS256 secret")
	str(&c.clusterSecret, "cluster-secret", "", "shared by the nodes: encrypts gossip, authenticates the node link and keys its TLS")
	str(&c.linkCert, "cluster-cert", "", "PEM certificate for the node link's TLS instead of one keyed by --cluster-secret (with --cluster-key, --cluster-ca)")
	str(&c.linkKey, "cluster-key", "", "PEM private key of --cluster-cert")
	str(&c.linkCA, "cluster-ca", "", "PEM CA certificates every node's --cluster-cert must chain to")
	fs.Float64Var(&c.rate, "rate", 50, "client frames per second per connection, bursts of 2x (0: no limit)")
	fs.bind("rate", envName("rate"))
	str(&c.agent, "agent", "echo", "agent engine: echo|demo|openai|http (openai: a model, with placeholder demo tools and the tools of --mcp servers; http: your own agent behind --agent-url)")
	fs.BoolVar(&c.devTokens, "dev-tokens", false, "enable POST /dev/token (loopback --listen only)")
	fs.bind("dev-tokens", envName("dev-tokens"))
	fs.BoolVar(&c.devTokensAnywhere, "dev-tokens-anywhere", false, "allow --dev-tokens on a non-loopback --listen: anyone who reaches the node can then log in as anyone")
	str(&c.origins, "allowed-origins", "", "browser origins allowed besides the node's own host, comma-separated (* for any)")
	dur(&c.idleTimeout, "idle-timeout", 2*time.Minute, "passivate a session actor with no client and no work after this long")
	dur(&c.memoryReturn, "memory-return", 10*time.Second, "this often, return to the OS the memory a wave of hibernations freed (0: leave it to the Go runtime)")
	dur(&c.hibernateAfter, "hibernate-after", 10*time.Second, "unload a session whose clients are attached but quiet after this long, keeping only their sockets (0: never)")
	dur(&c.demo.StreamDelay, "demo-stream-delay", 100*time.Millisecond, "pace of the demo engine's streamed reply (one part per word; 0 answers in one piece)")
	dur(&c.flushInterval, "stream-flush", 50*time.Millisecond, "coalesce a streamed reply's parts that come within this interval into one delta (0: each at once)")
	dur(&c.demo.SearchDelay, "demo-search-delay", 3*time.Second, "how long the demo and openai engines' search tool takes (openai's is a placeholder with canned results)")
	fs.BoolVar(&c.demo.SearchIdempotent, "demo-search-idempotent", false, "declare the demo search tool idempotent (re-run after a crash instead of failing)")
	c.openai.bind(fs)
	c.mcp.bind(fs)
	c.agentHTTP.bind(fs)
	str(&c.logLevel, "log-level", "info", "debug|info|warn|error")
	str(&c.logFormat, "log-format", "text", "text|json")
	str(&c.tlsCert, "tls-cert", "", "PEM certificate (chain) for clients' https:// and wss://; re-read on SIGHUP (needs --tls-key)")
	str(&c.tlsKey, "tls-key", "", "PEM private key of --tls-cert; re-read with it on SIGHUP")
	str(&c.pprof, "pprof", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060); off by default")
	return fs
}

// envName is the environment variable of a serve flag: TETHER_ and the
// flag in upper case.
func envName(flagName string) string {
	return "TETHER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (c *serveConfig) check() error {
	switch {
	case c.window <= 0 || c.retention <= 0 || c.helloTimeout <= 0 || c.reauthMaxAge <= 0 || c.idleTimeout <= 0:
		return errors.New("serve: durations must be positive")
	case c.hibernateAfter < 0 || c.memoryReturn < 0:
		return errors.New("serve: --hibernate-after and --memory-return must be ≥ 0 (0: never)")
	case c.bootstrapExpect < 0:
		return errors.New("serve: --bootstrap-expect must be ≥ 0")
	case c.replayLimit < 1 || c.maxFrame < 256 || c.maxContent < 1 || c.rate < 0 || c.replicas < 1:
		return errors.New("serve: --replay-limit, --max-content and --replicas must be ≥ 1, --max-frame ≥ 256, --rate ≥ 0")
	case c.maxContext < 2 || c.maxTurns < 1 || c.tailBytes < 1 || c.maxQueue < 1<<16:
		return errors.New("serve: --max-context ≥ 2, --max-turns and --tail-bytes ≥ 1, --max-queue-bytes ≥ 65536")
	case c.agent != "echo" && c.agent != "demo" && c.agent != "openai" && c.agent != "http":
		return fmt.Errorf("serve: unknown --agent %q (echo|demo|openai|http)", c.agent)
	case c.agent == "openai" && c.openai.check() != nil:
		return c.openai.check()
	case c.agent != "openai" && len(c.mcp.servers.vals)+len(c.mcp.headers.vals) > 0:
		return fmt.Errorf("serve: --mcp and --mcp-header are for --agent openai (not %s)", c.agent)
	case c.agent == "http" && c.agentHTTP.check() != nil:
		return c.agentHTTP.check()
	case c.logFormat != "text" && c.logFormat != "json":
		return fmt.Errorf("serve: unknown --log-format %q (text|json)", c.logFormat)
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return errors.New("serve: --tls-cert and --tls-key go together")
	case (c.linkCert == "") != (c.linkKey == "") || (c.linkCert == "") != (c.linkCA == ""):
		return errors.New("serve: --cluster-cert, --cluster-key and --cluster-ca go together")
	case c.linkCert != "" && c.clusterSecret == "":
		return errors.New("serve: --cluster-cert needs --cluster-secret too (it still encrypts gossip and authenticates each node)")
	case c.gossipTiming != "lan" && c.gossipTiming != "local" && c.gossipTiming != "test":
		return fmt.Errorf("serve: unknown --gossip-timing %q (lan|local|test)", c.gossipTiming)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		return fmt.Errorf("serve: unknown --log-level %q (debug|info|warn|error)", c.logLevel)
	}
	if _, err := c.mcp.config(); err != nil {
		return err
	}
	if c.clusterSecret == "" && !loopback(c.gossip) {
		return fmt.Errorf("serve: --gossip %s is not a loopback address: set --cluster-secret (or TETHER_CLUSTER_SECRET)", c.gossip)
	}
	if c.devTokens && !loopback(c.listen) && !c.devTokensAnywhere {
		return fmt.Errorf("serve: --dev-tokens lets anyone who reaches the node log in as anyone; --listen %s is not loopback: "+
			"add --dev-tokens-anywhere if you mean it", c.listen)
	}
	return nil
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

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func (m *Main) serve(ctx context.Context, args []string) error {
	c, err := m.parseServe(args)
	if err != nil {
		return err
	}
	logger := newLogger(m.Stderr, c.logLevel, c.logFormat)
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return fmt.Errorf("serve: data directory: %w", err)
	}
	secret, err := jwtSecret(c)
	if err != nil {
		return err
	}
	if c.devTokens {
		logger.Warn("dev tokens are on: POST /dev/token gives anyone a token for any user")
	}
	var agent engine.Engine = engine.Echo{}
	if c.agent == "demo" {
		agent = engine.NewDemo(c.demo)
	}
	if c.agent == "openai" {
		oe, closeEngine, err := c.openai.engine(ctx, c.demo.SearchDelay, &c.mcp, logger)
		if err != nil {
			return err
		}
		defer closeEngine()
		agent = oe
	}
	if c.agent == "http" {
		he, err := c.agentHTTP.engine(logger)
		if err != nil {
			return err
		}
		defer he.Close()
		agent = he
	}
	var certs *gateway.CertFiles
	if c.tlsCert != "" {
		if certs, err = gateway.NewCertFiles(c.tlsCert, c.tlsKey); err != nil {
			return fmt.Errorf("serve: --tls-cert/--tls-key: %w", err)
		}
	}
	var origins []string
	if c.origins != "" {
		origins = strings.Split(c.origins, ",")
	}
	nc := node.Config{
		Dir: c.data, Listen: c.listen, NodeID: c.nodeID, Logger: logger, Cluster: c.clusterConfig(), Advertise: c.advertise,
		Actor: actor.Config{
			Engine: agent, Window: c.window, Retention: c.retention, ReplayLimit: c.replayLimit,
			IdleTimeout: c.idleTimeout, ReauthMaxAge: c.reauthMaxAge, MaxTurns: c.maxTurns, HibernateAfter: hibernateAfter(c.hibernateAfter),
			MaxContextBytes: c.maxContext, MaxSessionsPerUser: c.maxSessions, TailBytes: c.tailBytes,
			FlushInterval: flushOrOff(c.flushInterval),
		},
		Gateway: gateway.Config{
			Secret: secret, DevTokens: c.devTokens, HelloTimeout: c.helloTimeout, MaxFrame: c.maxFrame,
			MaxContent: c.maxContent, Rate: c.rate, NoRateLimit: c.rate == 0, MaxQueueBytes: c.maxQueue,
			AllowedOrigins: origins,
		},
	}
	if certs != nil {
		nc.Gateway.TLS = certs.TLSConfig()
	}
	nc.Listening = func(addr, id string) { logger.Info("serving", "addr", addr, "node", id) }
	n, err := node.Start(ctx, nc)
	if err != nil && !c.gossipSet && c.join == "" && addrInUse(err) {
		// The default gossip address is taken and there is nothing to
		// join: run alone rather than refuse to start.
		logger.Warn("the default gossip address is in use: this node runs alone (give --gossip to let others join it)", "gossip", c.gossip)
		nc.Cluster = nil
		n, err = node.Start(ctx, nc)
	}
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if c.pprof != "" {
		stop, err := servePprof(c.pprof, logger)
		if err != nil {
			n.Close()
			return fmt.Errorf("serve: --pprof: %w", err)
		}
		defer stop()
	}
	defer startMemoryReturner(c.memoryReturn, n.Registry, n.Metrics.CountMemoryReturn, logger)()
	if n.Cluster != nil {
		logger.Info("gossip", "addr", n.Cluster.GossipAddr(), "join", c.join, "replicas", c.replicas)
	}
	if certs != nil {
		stop := reloadOnHUP(certs, logger)
		defer stop()
	}
	logger.Info("listening", "addr", n.Addr, "node", n.ID, "agent", c.agent, "tls", certs != nil)

	select {
	case err := <-n.Served():
		n.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "node", n.ID)
	if err := n.Close(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	logger.Info("stopped", "node", n.ID)
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

// clusterConfig is the node's cluster membership from the flags.
func (c *serveConfig) clusterConfig() *cluster.Config {
	cc := &cluster.Config{
		Gossip: c.gossip, Secret: c.clusterSecret, Replicas: c.replicas, BootstrapExpect: c.bootstrapExpect,
		LinkCertFile: c.linkCert, LinkKeyFile: c.linkKey, LinkCAFile: c.linkCA,
	}
	if c.join != "" {
		for _, s := range strings.Split(c.join, ",") {
			if s = strings.TrimSpace(s); s != "" {
				cc.Seeds = append(cc.Seeds, s)
			}
		}
	}
	switch c.gossipTiming {
	case "local":
		cc.Timing = cluster.LocalTiming()
	case "test":
		cc.Timing = cluster.TestTiming()
		cc.ForwardFor = 3 * time.Second
	default:
		cc.Timing = cluster.LANTiming()
	}
	return cc
}

// addrInUse reports whether err is a bind to an address in use (memberlist
// does not wrap its errors).
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

// flushOrOff maps --stream-flush 0 (each part at once) to the registry's
// "off".
func flushOrOff(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// reloadOnHUP re-reads the TLS certificate and key at each SIGHUP, so a
// renewed certificate is served without a restart; a pair that does not
// load is logged and the one served so far stays. stop ends it.
func reloadOnHUP(certs *gateway.CertFiles, logger *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-hup:
				if err := certs.Reload(); err != nil {
					logger.Error("TLS certificate reload failed: still serving the previous one", "err", err)
					continue
				}
				logger.Info("TLS certificate reloaded")
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-exited
	}
}

// hibernateAfter maps the flag (0: never) to actor.Config (negative: never).
func hibernateAfter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
