package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tether-dev/tether/actor/workers"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/cluster"
	"github.com/tether-dev/tether/gateway/internal/cork"
	"github.com/tether-dev/tether/gateway/wire"
)

// Backend is where the gateway finds sessions. Resume, Create and
// Snapshot follow the contracts of actor.Registry's methods of the same
// names; NewID makes a fresh session id.
type Backend interface {
	Resume(ctx context.Context, req actor.ResumeRequest) (actor.Session, error)
	Create(ctx context.Context, req actor.CreateRequest) (actor.Session, error)
	NewID() string
	Snapshot(ctx context.Context, sid, user string, authTime time.Time) (actor.Snapshot, error)
}

// ErrUnavailable from a Backend means the session's owner cannot be
// reached right now; the client is told to retry (1013). It is the
// cluster's sentinel, so the clustered backend needs no mapping.
var ErrUnavailable = cluster.ErrUnavailable

// Config configures a Server. Backend and Secret are required.
type Config struct {
	Backend Backend
	// Secret is the HS256 key tokens are checked with.
	Secret []byte
	// DevTokens enables POST /dev/token.
	DevTokens bool
	// HelloTimeout is the time allowed for the first frame, from the
	// upgrade; nothing extends it. Default 10s.
	HelloTimeout time.Duration
	// MaxFrame is the largest client message in bytes. Default 65536.
	MaxFrame int64
	// MaxContent is the largest send content in bytes. Default 32768.
	MaxContent int
	// Rate is client frames (all but ping) per second per connection,
	// bursts of twice that; 0 means no limit. Default 50 (set NoRateLimit
	// for none).
	Rate        float64
	NoRateLimit bool
	// MaxQueueBytes is the byte budget of what waits to be written to one
	// client; a client that would pass it is closed with 1013. Default
	// 4 MiB (a history page is at most 1 MiB).
	MaxQueueBytes int
	// PingInterval is how long a client may be silent before the server
	// pings it; PongWait how long before it is dropped as dead. Defaults
	// 30s and 75s. One reaper goroutine checks every connection.
	PingInterval, PongWait time.Duration
	// WriteTimeout bounds one write to a client. Default 10s.
	WriteTimeout time.Duration
	// HeaderTimeout bounds reading a request's headers, and IdleTimeout
	// how long a keep-alive HTTP connection may wait for its next
	// request, on every listener: a client cannot hold connections open
	// for free. Defaults 10s and 60s.
	HeaderTimeout, IdleTimeout time.Duration
	// AllowedOrigins are the browser origins (scheme://host[:port]) whose
	// pages may open the WebSocket and call the HTTP API; "*" allows any.
	// A request with no Origin (not a browser) is always allowed, and so
	// is a page of the node's own host. Default: the node's own host only.
	AllowedOrigins []string
	// Link, if set, is the cluster's node link and Raft transport, served
	// at /v1/link and /v1/raft.
	Link http.Handler
	// TLS, if set, makes clients use TLS (https://, wss://): Serve
	// handshakes each connection that starts with a TLS record and answers
	// any other plain-text request with 400. Give it a GetCertificate
	// (CertFiles.TLSConfig) to swap certificates without a restart.
	// Default nil: clients use plain text.
	TLS *tls.Config
	// LinkTLS, if set, is the TLS configuration of the node link
	// (cluster.Cluster.LinkTLS): a handshake whose ClientHello asks for
	// cluster.LinkALPN gets it instead of TLS, and /v1/link and /v1/raft
	// are served only on such connections (403 on any other). Nil: the
	// link is plain text, which the cluster allows only on loopback.
	LinkTLS *tls.Config
	// Ready reports whether the node can serve (GET /readyz). Default:
	// always ready.
	Ready func() error
	// Metrics; default a fresh NewMetrics().
	Metrics *Metrics
	// Now is the clock for token checks. Default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Backend == nil || len(c.Secret) == 0 {
		return errors.New("gateway: Config.Backend and Config.Secret are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HelloTimeout, 10*time.Second)
	def(&c.PingInterval, 30*time.Second)
	def(&c.PongWait, 75*time.Second)
	def(&c.WriteTimeout, 10*time.Second)
	def(&c.HeaderTimeout, 10*time.Second)
	def(&c.IdleTimeout, 60*time.Second)
	if c.MaxFrame <= 0 {
		c.MaxFrame = 65536
	}
	if c.MaxContent <= 0 {
		c.MaxContent = 32768
	}
	if c.NoRateLimit {
		c.Rate = 0
	} else if c.Rate <= 0 {
		c.Rate = 50
	}
	if c.MaxQueueBytes <= 0 {
		c.MaxQueueBytes = 4 << 20
	}
	if c.Ready == nil {
		c.Ready = func() error { return nil }
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Server is the HTTP and WebSocket front of a node.
type Server struct {
	cfg      Config
	log      *slog.Logger
	metrics  *Metrics
	upgrader websocket.Upgrader
	http     *http.Server
	bufs     sync.Pool // buffers for corked writes and for frames being read
	frames   sync.Pool // buffers of frames queued for clients (conn.encode)
	tokens   *verifier
	// ctx is cancelled by Close; it bounds every call into the backend.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
	wg     sync.WaitGroup // connection goroutines and the reaper
	// workers runs connections' frame handling and writes on goroutines
	// whose stacks have grown already.
	workers *workers.Pool
	// poller holds the sockets of idle connections, so that they wait
	// with no goroutine (package cork: Park); nil where there is none.
	poller *cork.Poller

	closeOnce sync.Once
}

// New makes a server; Serve starts it.
func New(cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics, conns: make(map[*conn]struct{}), workers: workers.New(workers.Config{}),
		tokens: newVerifier(cfg.Secret)}
	// Small: frames are mostly a few hundred bytes, buffers grow for the
	// rest, and the pool loses its buffers to the GC every other cycle.
	s.bufs.New = func() any { b := make([]byte, 0, 4<<10); return &b }
	s.frames.New = func() any { b := make([]byte, 0, 256); return &b }
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.upgrader = websocket.Upgrader{
		// Small read buffers and a shared write buffer pool keep an idle
		// connection cheap; the handler returns right after the upgrade so
		// net/http's own buffers are freed.
		ReadBufferSize:  256,
		WriteBufferSize: 4096,
		WriteBufferPool: &sync.Pool{},
		CheckOrigin:     s.originAllowed,
	}
	handler := s.routes()
	var connCtx func(context.Context, net.Conn) context.Context
	if cfg.TLS != nil || cfg.LinkTLS != nil {
		handler, connCtx = s.guardTLS(handler), connContext
	}
	s.http = &http.Server{
		Handler:           handler,
		ConnContext:       connCtx,
		ReadHeaderTimeout: cfg.HeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	tasks := s.workers.Tasks
	s.metrics.tasks.Store(&tasks)
	if p, err := cork.NewPoller(); err == nil {
		s.poller = p
		parked := p.Parked
		s.metrics.parked.Store(&parked)
	} else {
		s.log.Debug("idle connections keep a goroutine each", "err", err)
	}
	s.wg.Add(1)
	go s.reap()
	return s, nil
}

// Serve accepts connections on ln until Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.TLS != nil || s.cfg.LinkTLS != nil {
		ln = sniffListener{Listener: ln, cfg: &tls.Config{GetConfigForClient: s.tlsFor}}
	}
	err := s.http.Serve(cork.Listener{Listener: ln, Pool: &s.bufs, Poller: s.poller})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits (up to ctx) for plain
// HTTP requests in flight. WebSocket clients stay until Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true // no more upgrades
	s.mu.Unlock()
	return s.http.Shutdown(ctx)
}

// Close closes every client still connected with 1012 (reconnect
// elsewhere) and waits for their goroutines. Safe to call twice.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		_ = s.http.Close()
		s.mu.Lock()
		s.closed = true
		conns := make([]*conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			c.closeWith(wire.CloseRestart, "node shutting down")
		}
		s.cancel()
		if s.poller != nil {
			_ = s.poller.Close() // wakes what is still parked; nothing parks again
		}
		s.wg.Wait()
		_ = s.workers.Close() // every connection has ended (s.wg): it only stops parked goroutines
	})
	return nil
}

// Handler is the server's HTTP handler, for tests that serve it themselves.
func (s *Server) Handler() http.Handler { return s.http.Handler }

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered with an HTTP error
	}
	c := newConn(s, ws)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(wire.CloseRestart, "node shutting down"), time.Now().Add(time.Second))
		ws.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.metrics.conns.Inc()
	s.metrics.opened.Inc()
	go c.serve()
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.metrics.conns.Dec()
}

// reap is the one goroutine that watches every connection's clock: the
// hello deadline, and the heartbeat of silent clients (ping after
// PingInterval, drop after PongWait). No connection has a timer of its
// own.
func (s *Server) reap() {
	defer s.wg.Done()
	every := max(min(s.cfg.HelloTimeout, s.cfg.PingInterval)/4, 5*time.Millisecond)
	t := time.NewTicker(min(every, time.Second))
	defer t.Stop()
	// One list for every tick: a new one each second is garbage enough
	// (8 bytes a connection) to keep an idle node collecting.
	var conns []*conn
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			conns = slices.Grow(conns[:0], len(s.conns))
			for c := range s.conns {
				conns = append(conns, c)
			}
			s.mu.Unlock()
			for _, c := range conns {
				s.check(c, now)
			}
			clear(conns) // holds no closed connection until the next tick
		}
	}
}

func (s *Server) check(c *conn, now time.Time) {
	last := c.lastRead.Load()
	switch {
	case last == 0:
		if now.Sub(c.opened) >= s.cfg.HelloTimeout && !c.isClosing() {
			c.fail(wire.CodeBadRequest, "no hello frame in time", wire.ClosePolicy)
			// A client that never reads cannot take the close frame: make
			// sure the socket goes anyway.
			time.AfterFunc(s.cfg.WriteTimeout+closeGrace, func() { c.ws.Close() })
		}
	case now.Sub(time.Unix(0, last)) >= s.cfg.PongWait:
		c.ws.Close() // dead peer: no close handshake is possible
	case now.Sub(time.Unix(0, last)) >= s.cfg.PingInterval && c.pinged.CompareAndSwap(false, true):
		c.sendPing()
	}
}

// Local adapts an actor.Registry to a Backend: the owner of every session
// is this node.
func Local(r *actor.Registry) Backend { return local{r} }

type local struct{ r *actor.Registry }

func (l local) Resume(ctx context.Context, req actor.ResumeRequest) (actor.Session, error) {
	h, err := l.r.Resume(ctx, req)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (l local) Create(ctx context.Context, req actor.CreateRequest) (actor.Session, error) {
	h, err := l.r.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (l local) NewID() string { return l.r.NewID() }

func (l local) Snapshot(ctx context.Context, sid, user string, authTime time.Time) (actor.Snapshot, error) {
	return l.r.Snapshot(ctx, sid, user, authTime)
}

// Clustered is a cluster as a Backend: each session is served by its
// owner, here or on another node.
func Clustered(c *cluster.Cluster) Backend { return c }
