package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/vmihailenco/msgpack/v5"
)

var (
	// ErrLinkDown: the connection to the peer was lost or could not be made;
	// calls and streams on it fail with it. The next Call or Open redials.
	ErrLinkDown = errors.New("cluster: link down")
	// ErrClosed: the Link (or the stream) was closed by this side.
	ErrClosed = errors.New("cluster: link closed")
	// ErrOverflow: a stream's inbound buffer filled up (its consumer did
	// not keep up), so the stream was reset.
	ErrOverflow = errors.New("cluster: stream buffer overflow")
	// ErrReset: the peer reset the stream.
	ErrReset = errors.New("cluster: stream reset")
	// ErrAuth: the peer failed the challenge-response (a different secret,
	// or not a Tether node).
	ErrAuth = errors.New("cluster: link authentication failed")
	// ErrTooLarge: a request, reply or stream value over MaxFrame.
	ErrTooLarge = errors.New("cluster: frame too large")
)

// RemoteError is an error the peer's Serve returned.
type RemoteError struct {
	Method  string
	Code    string // the error's LinkCode(), if it had one
	Message string
}

func (e *RemoteError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("cluster: remote %s: %s (%s)", e.Method, e.Message, e.Code)
	}
	return fmt.Sprintf("cluster: remote %s: %s", e.Method, e.Message)
}

// LinkCode makes a RemoteError keep its code when a Serve passes it on.
func (e *RemoteError) LinkCode() string { return e.Code }

// WithCode wraps err so that the peer's RemoteError carries code; a Serve
// may also return any error with a LinkCode() string method.
func WithCode(code string, err error) error { return &codedError{code: code, err: err} }

type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string    { return e.err.Error() }
func (e *codedError) Unwrap() error    { return e.err }
func (e *codedError) LinkCode() string { return e.code }

// ErrorCode returns the code of the first error in err's chain that has one
// (a RemoteError, or anything with LinkCode), or "".
func ErrorCode(err error) string {
	var c interface{ LinkCode() string }
	if errors.As(err, &c) {
		return c.LinkCode()
	}
	return ""
}

// LinkConfig configures NewLink.
type LinkConfig struct {
	// NodeID is this node's id, proven to peers and given to Serve/Accept
	// of theirs as from.
	NodeID string
	// Secret is shared by all nodes; an HMAC key is derived from it. Empty
	// is allowed only between loopback addresses (tests).
	Secret string
	// Serve answers incoming calls; its ctx ends when the caller gives up
	// or the connection goes. An error with a LinkCode() string method
	// reaches the caller as a RemoteError with that Code.
	Serve func(ctx context.Context, from string, op Op, body msgpack.RawMessage) (any, error)
	// Accept takes incoming streams. It runs on its own goroutine; it may
	// serve s itself or hand it off, and must return once s.Done() is
	// closed (Link.Close waits for it).
	Accept func(from string, op Op, body msgpack.RawMessage, s *Stream)
	// CallTimeout bounds a call that has no earlier ctx deadline (5 s).
	CallTimeout time.Duration
	// DialTimeout bounds dialing plus authentication (2 s).
	DialTimeout time.Duration
	// QueueSize is each connection's outgoing frame queue (1024); Call,
	// Open and Send block, with their ctx, while it is full.
	QueueSize int
	// StreamBuffer is each stream's inbound buffer, in values (256). A
	// stream whose buffer overflows is reset (ErrOverflow) rather than
	// stall the connection's reader.
	StreamBuffer int
	// PingInterval is how often each side pings; a peer silent for three
	// intervals is dropped (2 s).
	PingInterval time.Duration
	// MaxFrame bounds one request, reply or stream value, encoded (16 MiB).
	MaxFrame int
	// TLS, if set, is the client side of the link's TLS (LinkTLS.Client):
	// peers are dialed with wss:// and must present the cluster's
	// certificate. Nil dials ws://, allowed only to loopback addresses
	// without a Secret and meant for tests.
	TLS *tls.Config
	// Path is where peers serve Handler (/v1/link).
	Path   string
	Logger *slog.Logger

	maxBatch int // frames per WebSocket message; tests set 1 to measure batching
}

func (c LinkConfig) withDefaults() LinkConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.CallTimeout, 5*time.Second)
	def(&c.DialTimeout, 2*time.Second)
	def(&c.PingInterval, 2*time.Second)
	if c.QueueSize <= 0 {
		c.QueueSize = 1024
	}
	if c.StreamBuffer <= 0 {
		c.StreamBuffer = 256
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = 16 << 20
	}
	if c.Path == "" {
		c.Path = "/v1/link"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.maxBatch <= 0 {
		c.maxBatch = 1024
	}
	return c
}

// Link holds this node's connections to its peers: one it dials per peer
// address for its own calls and streams, and those peers dial to it.
type Link struct {
	cfg      LinkConfig
	log      *slog.Logger
	key      []byte
	dialer   websocket.Dialer
	upgrader websocket.Upgrader

	ctx    context.Context // ends at Close; Serve contexts derive from it
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the Link starts

	mu       sync.Mutex
	closed   bool
	peers    map[string]*peer // by dialed address
	accepted map[*conn]struct{}
}

// peer is the state of the connection to one dialed address.
type peer struct {
	conn     *conn
	dialing  chan struct{} // closed when the dial in progress ends
	failures int           // dials in a row that failed
	retryAt  time.Time     // no dial before this (backoff)
	lastErr  error
}

// NewLink returns a Link; serve Handler() for peers to reach it.
func NewLink(cfg LinkConfig) (*Link, error) {
	cfg = cfg.withDefaults()
	if cfg.NodeID == "" {
		return nil, errors.New("cluster: LinkConfig.NodeID is required")
	}
	l := &Link{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "link", "node", cfg.NodeID),
		key:      deriveKey(linkKeyLabel, cfg.Secret),
		peers:    make(map[string]*peer),
		accepted: make(map[*conn]struct{}),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.dialer = websocket.Dialer{
		HandshakeTimeout: cfg.DialTimeout,
		ReadBufferSize:   32 << 10,
		WriteBufferSize:  64 << 10, // a client masks into this buffer: fewer writes per batch
	}
	if cfg.TLS != nil {
		// The link's own handshake: the websocket package refuses an ALPN
		// other than http/1.1 on connections it handshakes itself.
		l.dialer.NetDialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialTLS(ctx, network, addr, cfg.TLS)
		}
	}
	l.upgrader = websocket.Upgrader{
		HandshakeTimeout: cfg.DialTimeout,
		ReadBufferSize:   32 << 10,
		WriteBufferSize:  32 << 10,
		// Peers send no Origin; a browser always does.
		CheckOrigin: func(r *http.Request) bool { return r.Header.Get("Origin") == "" },
	}
	return l, nil
}

// goSafe runs fn on a goroutine the Link waits for at Close; false (and fn
// not run) once the Link is closed.
func (l *Link) goSafe(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		fn()
	}()
	return true
}

// Op names what a call or a stream asks of the node at the other end:
// one of the cluster's operations (msgs.go); the link itself gives it no
// meaning.
type Op string

// Call sends req to method on the peer at addr (its LinkAddr) and decodes
// the reply into resp (nil to discard it). It fails with the ctx error (or
// context.DeadlineExceeded after CallTimeout), ErrLinkDown, ErrClosed,
// ErrAuth, ErrTooLarge or a *RemoteError.
func (l *Link) Call(ctx context.Context, addr string, method Op, req, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	defer cancel()
	body, err := l.encode(req)
	if err != nil {
		return fmt.Errorf("cluster: call %s: %w", method, err)
	}
	c, err := l.conn(ctx, addr)
	if err != nil {
		return fmt.Errorf("cluster: call %s on %s: %w", method, addr, err)
	}
	r, err := c.call(ctx, method, body)
	if err != nil {
		return fmt.Errorf("cluster: call %s on %s: %w", method, addr, err)
	}
	if r.remote != nil {
		r.remote.Method = string(method)
		return r.remote
	}
	if resp != nil {
		if err := msgpack.Unmarshal(r.body, resp); err != nil {
			return fmt.Errorf("cluster: call %s on %s: decode reply: %w", method, addr, err)
		}
	}
	return nil
}

// Open starts a stream to method on the peer at addr, req being its first
// message (given to the peer's Accept). It does not wait for the peer: a
// peer that refuses the stream resets it.
func (l *Link) Open(ctx context.Context, addr string, method Op, req any) (*Stream, error) {
	body, err := l.encode(req)
	if err != nil {
		return nil, fmt.Errorf("cluster: open %s: %w", method, err)
	}
	c, err := l.conn(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: open %s on %s: %w", method, addr, err)
	}
	s, err := c.open(ctx, method, body)
	if err != nil {
		return nil, fmt.Errorf("cluster: open %s on %s: %w", method, addr, err)
	}
	return s, nil
}

func (l *Link) encode(v any) (msgpack.RawMessage, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	if len(b) > l.cfg.MaxFrame {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), l.cfg.MaxFrame)
	}
	return b, nil
}

// conn returns the live connection to addr, dialing it if there is none.
// One dial runs at a time per address; after failed dials the next waits
// out a backoff (50 ms doubling to 1 s) during which calls fail at once.
func (l *Link) conn(ctx context.Context, addr string) (*conn, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, ErrClosed
		}
		p := l.peers[addr]
		if p == nil {
			p = &peer{}
			l.peers[addr] = p
		}
		if p.conn != nil && !p.conn.isDown() {
			c := p.conn
			l.mu.Unlock()
			return c, nil
		}
		if p.dialing == nil {
			if wait := time.Until(p.retryAt); wait > 0 {
				err := p.lastErr
				l.mu.Unlock()
				return nil, fmt.Errorf("%w (next dial in %v): %w", ErrLinkDown, wait.Round(time.Millisecond), err)
			}
			p.dialing = make(chan struct{})
			l.wg.Add(1)
			go l.dial(addr, p)
		}
		done := p.dialing
		l.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		l.mu.Lock()
		err := p.lastErr
		ok := p.conn != nil && !p.conn.isDown()
		l.mu.Unlock()
		if !ok && err != nil {
			return nil, err
		}
	}
}

// dial connects to addr for p, on a goroutine of its own so that a caller
// giving up does not abort a dial others wait for.
func (l *Link) dial(addr string, p *peer) {
	defer l.wg.Done()
	c, err := l.dialConn(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	close(p.dialing)
	p.dialing = nil
	if err == nil && l.closed {
		err = ErrClosed
	}
	if err != nil {
		if c != nil {
			c.ws.Close()
		}
		p.failures++
		p.retryAt = time.Now().Add(min(50*time.Millisecond<<(p.failures-1), time.Second))
		p.lastErr = err
		l.log.Debug("dial failed", "addr", addr, "failures", p.failures, "err", err)
		return
	}
	p.failures, p.retryAt, p.lastErr = 0, time.Time{}, nil
	p.conn = c
	l.startConn(c)
}

// startConn starts c's reader and writer; caller holds l.mu, Link open.
func (l *Link) startConn(c *conn) {
	l.wg.Add(2)
	go func() { defer l.wg.Done(); c.readLoop() }()
	go func() { defer l.wg.Done(); c.writeLoop() }()
}

// dropped forgets c once it is down, so the next Call redials at once.
func (l *Link) dropped(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.accepted, c)
	if p := l.peers[c.addr]; p != nil && p.conn == c {
		p.conn = nil
	}
}

// PeerID returns the node id the peer at addr proved on the live
// connection this Link dialed to it, or "" when there is none.
func (l *Link) PeerID(addr string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.peers[addr]; p != nil && p.conn != nil && !p.conn.isDown() {
		return p.conn.peer
	}
	return ""
}

// Close closes every connection (peers see the close), fails pending
// calls and open streams with ErrClosed, and waits for the goroutines the
// Link started, Serve and Accept calls included. Safe to call twice.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	var conns []*conn
	for _, p := range l.peers {
		if p.conn != nil {
			conns = append(conns, p.conn)
		}
	}
	for c := range l.accepted {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	l.cancel()
	for _, c := range conns {
		c.closeGracefully()
	}
	l.wg.Wait()
	return nil
}
