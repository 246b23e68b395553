package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/wire"
)

// Config configures a Client. URLs and one of Token and TokenFunc are
// required.
type Config struct {
	// URLs are node addresses, ws://host:port/v1/ws. The first one tried is
	// picked at random; every failure moves on to the next.
	URLs []string
	// Token is the JWT sent in every hello, unless TokenFunc is set.
	Token string
	// TokenFunc, when set, is asked for a token when the client holds none
	// it can use: before the first connect, when the one it holds expires
	// within a minute (its exp claim, read without verifying it), and
	// after the server refused the one it holds (close 1008 unauthorized
	// or 4003 reauth_required), so that a reconnect reuses a valid token.
	// A token without a readable exp is asked for on every connect. It
	// must return when ctx ends. An error counts as a failed attempt; one
	// that matches ErrUnauthorized ends the client (no token will come).
	// A fresh token the server refuses ends the client as well.
	TokenFunc func(ctx context.Context) (string, error)
	// SessionID is the session to resume on the first connect; "" starts
	// a new one.
	SessionID string
	// Shared attaches to the session shared (PROTOCOL.md, attach
	// "shared"): the session's other connections (another terminal, a
	// browser tab) stay open, and every one of them gets every new entry
	// and delta live, whoever caused it. Without it, resuming supersedes
	// them (4001). Every resume's hello carries it (a new session has no
	// other connection to keep). Messages stays gap-free and in order
	// either way; acks come only for this client's own sends.
	Shared bool
	// LastSeq is the newest seq of SessionID the caller has already seen;
	// Messages starts after it. 0 replays the session from its start.
	LastSeq uint64
	// MinBackoff and MaxBackoff bound the wait between reconnect attempts,
	// which doubles with every consecutive failure and is jittered
	// (a wait is random between half and all of its nominal value).
	// Defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// MaxAttempts is how many consecutive failed attempts (dial, token,
	// handshake) end the client with ErrUnreachable; 0 retries until Close
	// (or, inside Dial, until its context ends).
	MaxAttempts int
	// OnRetry, when set, is told of every failed connection attempt and
	// of the wait before the next one. It runs like OnSession.
	OnRetry func(url string, err error, wait time.Duration)
	// HandshakeTimeout bounds one attempt: token, dial, hello, session and
	// the resume's history_batch. Default 10s.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one frame write. Default 10s.
	WriteTimeout time.Duration
	// PingAfter is how long an attached socket may be silent (no frame,
	// no WebSocket ping from the server) before the client sends a ping
	// frame; PongTimeout is how long it then waits for any frame before
	// it treats the connection as lost and reconnects. Defaults 10s and
	// 5s, PROTOCOL.md's recommendation: a connection that went silent is
	// noticed within 15s. (They replace the former ReadTimeout.)
	PingAfter, PongTimeout time.Duration
	// AckTimeout bounds how long a send written on a socket waits for its
	// ack: past it the connection is treated as lost, and after the resume
	// the send is written again with its same id (the server stores it
	// once). Default 15s. (Other requests are answered at once by a live
	// server; the heartbeat notices a dead one.)
	AckTimeout time.Duration
	// MessageBuffer is how many entries wait in memory for the reader of
	// Messages. Beyond it the client stops buffering and later pages the
	// missed entries in from the server's log, so a slow reader costs
	// bounded memory and loses nothing. Default 1024.
	MessageBuffer int
	// MaxFrame is the largest frame the client writes: a send whose frame
	// is larger fails at once with ErrTooLarge instead of making the
	// server close the socket (1009). Set it to the server's --max-frame;
	// default 65536, the server's default; negative: no check. (A send
	// that makes the server close with 1009 anyway is refused the same
	// way, and the client reconnects without it.)
	MaxFrame int
	// Dialer opens the sockets. Default: a copy of websocket.DefaultDialer.
	// Its dial and handshake are bounded by HandshakeTimeout.
	Dialer *websocket.Dialer
	// TLS configures wss:// connections, e.g. RootCAs to trust a private
	// CA (see LoadCA); default the system's roots. It is given to the
	// Dialer unless the Dialer has a TLSClientConfig of its own.
	TLS *tls.Config
	// OnSession, when set, sees every session frame: the first connect's
	// and each resume's. It runs on the client's manager goroutine: it must
	// return quickly and must not call the Client's methods other than
	// SessionID, Stats and Err.
	OnSession func(wire.SessionFrame)
	// OnConnect, when set, is called each time a socket's session is
	// attached (for a resume: once its history_batch is in), with the URL
	// the socket was dialed at. Same rules as OnSession.
	OnConnect func(url string)
	// OnDisconnect, when set, is called when an attached socket is lost,
	// with the URL and the reason, before the client reconnects or ends.
	// Close does not call it. Same rules as OnSession.
	OnDisconnect func(url string, err error)
	// onLost is OnDisconnect for Chat, told also whether the client ends.
	onLost func(err error, ending bool)
	// Logger; nil logs nothing.
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if len(c.URLs) == 0 {
		return errors.New("client: Config.URLs is empty")
	}
	for _, u := range c.URLs {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "ws" && p.Scheme != "wss") || p.Host == "" {
			return fmt.Errorf("client: %q is not a ws:// or wss:// URL", u)
		}
	}
	if c.Token == "" && c.TokenFunc == nil {
		return errors.New("client: Config.Token or Config.TokenFunc is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.MinBackoff, 100*time.Millisecond)
	def(&c.MaxBackoff, 5*time.Second)
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	def(&c.HandshakeTimeout, 10*time.Second)
	def(&c.WriteTimeout, 10*time.Second)
	def(&c.PingAfter, 10*time.Second)
	def(&c.PongTimeout, 5*time.Second)
	def(&c.AckTimeout, 15*time.Second)
	if c.MaxFrame == 0 {
		c.MaxFrame = 65536
	}
	if c.MessageBuffer <= 0 {
		c.MessageBuffer = 1024
	}
	if c.Dialer == nil {
		d := *websocket.DefaultDialer
		c.Dialer = &d
	}
	if c.TLS != nil && c.Dialer.TLSClientConfig == nil {
		d := *c.Dialer // the caller's Dialer stays as it was
		d.TLSClientConfig = c.TLS
		c.Dialer = &d
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Stats are a client's counters since New (or Dial).
type Stats struct {
	Reconnects  uint64 // sessions resumed after the first connect
	Duplicates  uint64 // entries received again and dropped
	Gaps        uint64 // entries that did not follow the last one (each repaired)
	Resends     uint64 // sends written again after a reconnect or a rate_limited error
	Pings       uint64 // ping frames written after a silence
	Silent      uint64 // connections given up because no pong came (ErrSilent)
	AckTimeouts uint64 // connections given up because an answer did not come (ErrAckTimeout)
}

// Client is one connection, kept alive across drops, to one session.
// Its methods are safe for concurrent use.
type Client struct {
	cfg    Config
	log    *slog.Logger
	epoch  time.Time       // monotonic origin of the sockets' heard marks
	ctx    context.Context // cancelled by Close
	stop   context.CancelFunc
	reqs   chan request
	events chan event
	msgs   chan wire.Message
	parts  chan Partial
	ready  chan struct{} // closed when the first session is attached
	done   chan struct{} // closed when the client has ended; err says why
	exited chan struct{} // closed when the manager goroutine is gone

	mu        sync.Mutex
	sessionID string
	err       error

	delivered                          atomic.Uint64
	reconnects, dups, gaps, resends    atomic.Uint64
	pings, silent, ackTimeouts         atomic.Uint64
	readyOnce, doneOnce, closeStopOnce sync.Once
}

// New starts a client that connects in the background: it returns at
// once, and calls made before the session is attached wait for it (a
// send is written, with its id, once the socket is up). Ready is closed
// when the session is attached; Done when the client has ended.
func New(cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Client{
		cfg: cfg, log: cfg.Logger, epoch: time.Now(), reqs: make(chan request), events: make(chan event),
		msgs: make(chan wire.Message), parts: make(chan Partial), ready: make(chan struct{}),
		done: make(chan struct{}), exited: make(chan struct{}), sessionID: cfg.SessionID,
	}
	c.delivered.Store(cfg.LastSeq)
	c.ctx, c.stop = context.WithCancel(context.Background())
	go newManager(c).run()
	return c, nil
}

// Dial is New, then waits until the session is attached (for a resume:
// until its history_batch is in). ctx bounds only this first connection,
// retried with backoff across URLs; the client then lives until Close or
// until it ends (see Done).
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.ready:
		return c, nil
	case <-c.done:
		select {
		case <-c.ready: // attached, then ended at once: Err tells
			return c, nil
		default:
		}
		err := c.Err()
		c.Close()
		return nil, err
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

// Ready is closed once the first session is attached.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// SessionID is the attached session's id.
func (c *Client) SessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
}

// LastSeq is the seq of the newest entry received from Messages (or
// Config.LastSeq): resume from it to see the rest. It is exact: an entry
// already received is always counted.
func (c *Client) LastSeq() uint64 {
	ch := make(chan uint64, 1)
	select {
	case c.reqs <- request{lastSeq: ch}:
		return <-ch
	case <-c.exited:
		return c.delivered.Load()
	}
}

// Messages delivers every entry of the session after Config.LastSeq
// exactly once and in seq order, live or replayed, across reconnects. It
// is closed once the client has ended and what it held was read, or at
// Close. Read it: entries beyond Config.MessageBuffer are fetched again
// from the server only when there is room.
func (c *Client) Messages() <-chan wire.Message { return c.msgs }

// Partials delivers the agent reply being streamed (PROTOCOL.md's delta
// frames), as the whole text received so far: one reply at a time, the
// one that will become the next entry. A Partial for entry seq is only
// offered once every entry before seq was received from Messages, and
// never after entry seq itself was queued for Messages, which then
// supersedes it; a reader that reads both channels from one goroutine
// thus sees them in order. States the reader did not take are merged
// into the next, so reading it is optional and costs no memory. It is
// closed when the client has ended.
func (c *Client) Partials() <-chan Partial { return c.parts }

// Done is closed when the client has ended; Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the client runs, then the reason it ended.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		Reconnects: c.reconnects.Load(), Duplicates: c.dups.Load(), Gaps: c.gaps.Load(), Resends: c.resends.Load(),
		Pings: c.pings.Load(), Silent: c.silent.Load(), AckTimeouts: c.ackTimeouts.Load(),
	}
}

// Send sends content under a fresh random id and waits until it is
// durable, returning its seq. It survives reconnects: an unacked send is
// written again, with the same id, on the next connection, and the server
// stores it once. A refused send returns a *ServerError.
func (c *Client) Send(ctx context.Context, content string, metadata map[string]any) (uint64, error) {
	return c.SendID(ctx, "c-"+rand.Text(), content, metadata)
}

// SendID is Send with the caller's id (1–64 characters, unique within the
// session). Sending an id again returns the first send's seq. If ctx ends
// first the send may still be stored: SendID with the same id tells.
//
// A send the server refuses is never written again: too_large and
// bad_request come back as a *ServerError; a send whose frame is over the
// frame limit (Config.MaxFrame, or one that made the server close with
// 1009) fails with an error matching ErrTooLarge, and the client goes on
// without it. rate_limited is not a refusal: the send waits and is
// written again.
func (c *Client) SendID(ctx context.Context, id, content string, metadata map[string]any) (uint64, error) {
	return c.send(ctx, wire.ClientFrame{Type: wire.TypeSend, ID: id, Content: content, Metadata: metadata})
}

// Interrupt is Send for a message that stops the turn running now
// (PROTOCOL.md, send with "interrupt": true): that turn ends as by
// Cancel, then this message's turn starts. With no turn running it is a
// plain send.
func (c *Client) Interrupt(ctx context.Context, content string, metadata map[string]any) (uint64, error) {
	return c.InterruptID(ctx, "c-"+rand.Text(), content, metadata)
}

// InterruptID is Interrupt with the caller's id, as SendID is Send. A
// send written again after a reconnect is written with its interrupt;
// the server stores an id once and interrupts only when it stores it.
func (c *Client) InterruptID(ctx context.Context, id, content string, metadata map[string]any) (uint64, error) {
	return c.send(ctx, wire.ClientFrame{Type: wire.TypeSend, ID: id, Content: content, Metadata: metadata, Interrupt: true})
}

func (c *Client) send(ctx context.Context, f wire.ClientFrame) (uint64, error) {
	if f.ID == "" {
		return 0, errors.New("client: send id is empty")
	}
	cl, err := newCall(kindSend, f)
	if err != nil {
		return 0, err
	}
	r, err := c.call(ctx, cl)
	return r.seq, err
}

// History returns the entries just before beforeSeq (0: the newest), at
// most limit (0: the server's default, at most 200). It does not touch
// the Messages stream.
func (c *Client) History(ctx context.Context, beforeSeq uint64, limit int) (wire.HistoryBatch, error) {
	if limit < 0 {
		return wire.HistoryBatch{}, errors.New("client: history limit is negative")
	}
	cl, _ := newCall(kindHistory, wire.ClientFrame{Type: wire.TypeHistory, BeforeSeq: beforeSeq, Limit: limit})
	r, err := c.call(ctx, cl)
	return r.batch, err
}

// SetContext merges set into the session's user context (a nil value
// deletes its key) and returns the whole merged context; an empty set
// just reads it.
func (c *Client) SetContext(ctx context.Context, set map[string]any) (map[string]any, error) {
	if set == nil {
		set = map[string]any{}
	}
	// Not a wire.ClientFrame: its omitempty would drop an empty set,
	// which the server refuses (without an id to answer).
	data, err := json.Marshal(struct {
		Type string         `json:"type"`
		Set  map[string]any `json:"set"`
	}{wire.TypeContext, set})
	if err != nil {
		return nil, fmt.Errorf("client: encode context: %w", err)
	}
	r, err := c.call(ctx, &call{kind: kindContext, data: data})
	return r.context, err
}

// Complete ends the session for good and waits for the server to confirm.
// The client then ends with ErrCompleted once the server closes; entries
// still held are delivered before Messages closes.
func (c *Client) Complete(ctx context.Context) error {
	cl, _ := newCall(kindComplete, wire.ClientFrame{Type: wire.TypeComplete})
	_, err := c.call(ctx, cl)
	return err
}

// Cancel stops the turn that answers user entry replyTo, or with 0 the
// turn running now (PROTOCOL.md, cancel). What the turn produced stays:
// its streamed text becomes its agent entry with metadata.cancelled true
// (or a system entry "cancelled"), which arrives on Messages. A cancel
// for a turn that already ended does nothing.
//
// The server answers a cancel only with those entries, so Cancel returns
// once the frame is written on an attached socket (waiting, while
// offline, for the next one). A cancel is written once: a cancel lost
// with its socket is not written again after the resume.
func (c *Client) Cancel(ctx context.Context, replyTo uint64) error {
	cl, _ := newCall(kindCancel, wire.ClientFrame{Type: wire.TypeCancel, ReplyTo: replyTo})
	_, err := c.call(ctx, cl)
	return err
}

// Approve decides the tool call callID that waits for approval (a tool
// entry with metadata.status awaiting_approval): the decision arrives on
// Messages as the call's next tool entry, status approved or denied;
// then an approved call runs (started, completed or failed) and a denied
// one does not. The first decision stands: a later one does nothing.
//
// Like Cancel it returns once the frame is written. A call_id that is not
// waiting is refused by the server with bad_request, which comes without
// anything tying it to this call: it is logged, not returned; the entries
// on Messages tell what was decided.
func (c *Client) Approve(ctx context.Context, callID string, approved bool) error {
	if callID == "" {
		return errors.New("client: approve call id is empty")
	}
	cl, _ := newCall(kindApprove, wire.ClientFrame{Type: wire.TypeApprove, CallID: callID, Approved: &approved})
	_, err := c.call(ctx, cl)
	return err
}

// Drop abruptly closes the current socket, with no close frame, as a
// network failure would; the client reconnects and resumes by itself.
// It is meant for tests and demos.
func (c *Client) Drop() {
	select {
	case c.reqs <- request{drop: true}:
	case <-c.done:
	}
}

// Close ends the client: the socket is closed with 1000 (the session stays
// resumable within its window), pending calls return ErrClosed, Messages
// is closed, and every goroutine of the client has stopped on return.
func (c *Client) Close() error {
	c.closeStopOnce.Do(c.stop)
	<-c.exited
	return nil
}

// call hands r to the manager and waits for its answer.
func (c *Client) call(ctx context.Context, r *call) (result, error) {
	if n := c.cfg.MaxFrame; n > 0 && len(r.data) > n {
		return result{}, fmt.Errorf("%w: the %s frame is %d bytes, over the server's frame limit of %d bytes",
			ErrTooLarge, r.kind, len(r.data), n)
	}
	r.reply = make(chan result, 1)
	select {
	case c.reqs <- request{call: r}:
	case <-c.done:
		return result{}, c.Err()
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	select {
	case res := <-r.reply:
		return res, res.err
	case <-ctx.Done():
		select {
		case res := <-r.reply: // answered just now: the answer wins
			return res, res.err
		default:
		}
		select {
		case c.reqs <- request{cancel: r}:
		case <-c.done:
		}
		return result{}, ctx.Err()
	}
}

// end records why the client ended and closes Done; only the manager
// calls it.
func (c *Client) end(err error) {
	c.doneOnce.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
	})
}

func (c *Client) setSessionID(id string) {
	c.mu.Lock()
	c.sessionID = id
	c.mu.Unlock()
}
