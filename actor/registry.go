package actor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/wal"
)

// Config configures a Registry. Only Journal is required.
type Config struct {
	// Journal is where sessions live. Required.
	Journal Journal
	// Store is the local store the boot recovery scans and the liveness
	// mark is kept in. Default: Journal, if it is one.
	Store Store
	// Engine answers user messages. Default Echo.
	Engine Engine
	// Window is the reconnect window. Default 5m.
	Window time.Duration
	// ReplayLimit caps the entries of a resume's history_batch. Default 50.
	ReplayLimit int
	// IdleTimeout passivates an actor with no connection and no turn in
	// flight for this long; its state stays in the log. Default 2m.
	IdleTimeout time.Duration
	// ReauthMaxAge is how old a token's auth_time may be to resume a
	// sensitive session. Default 5m.
	ReauthMaxAge time.Duration
	// MaxActivations caps how many sessions are loaded from the log at
	// once, so a reconnect storm cannot stampede the disk. Default 32.
	MaxActivations int
	// MailboxSize is each actor's mailbox capacity. Default 16: a full
	// mailbox only makes the sender wait, and an idle session pays for every
	// slot.
	MailboxSize int
	// AliveInterval is how often the registry records that the node is
	// alive; after a crash, the last mark tells which reconnect windows
	// had already ended. Default 1s.
	AliveInterval time.Duration
	// SweepInterval is how often the store's retention sweep runs. The
	// registry runs it, not the store, so that it starts only after boot
	// recovery: a session that was alive when the node stopped must have
	// its window extended before any sweep looks at it. 0 disables it.
	SweepInterval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// NewID makes session ids. Default: 26 base32 characters from
	// crypto/rand (130 random bits).
	NewID func() string
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Store is the node-local part of the log that boot recovery needs.
type Store interface {
	ScanMeta(ctx context.Context, fn func(wal.Meta) error, onCorrupt func(error)) error
	LastAlive() (time.Time, bool, error)
	MarkAlive(ctx context.Context, t time.Time) error
	// Sweep deletes the sessions whose retention has passed.
	Sweep(ctx context.Context) (int, error)
}

var _ Store = (*wal.Log)(nil)

func (c *Config) setDefaults() error {
	if c.Journal == nil {
		return errors.New("actor: Config.Journal is required")
	}
	if c.Store == nil {
		c.Store, _ = c.Journal.(Store)
	}
	if c.Engine == nil {
		c.Engine = Echo{}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Window, 5*time.Minute)
	def(&c.IdleTimeout, 2*time.Minute)
	def(&c.ReauthMaxAge, 5*time.Minute)
	def(&c.AliveInterval, time.Second)
	if c.ReplayLimit <= 0 {
		c.ReplayLimit = 50
	}
	if c.MaxActivations <= 0 {
		c.MaxActivations = 32
	}
	if c.MailboxSize <= 0 {
		c.MailboxSize = 16
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewID == nil {
		c.NewID = rand.Text
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Stats are the registry's counters.
type Stats struct {
	Active       int    // actors in memory
	Activations  uint64 // sessions loaded from the log or created
	Passivations uint64 // actors stopped (idle, expired, completed)
	ToolRuns     uint64
}

// Registry activates session actors on demand and keeps track of them.
type Registry struct {
	cfg    Config
	ctx    context.Context // cancelled by Close: actors shut down
	cancel context.CancelFunc
	sem    chan struct{}

	mu     sync.Mutex
	actors map[string]*actor
	closed bool

	wg                        sync.WaitGroup // actors and the alive loop
	activations, passivations atomic.Uint64
	toolRuns                  atomic.Uint64
	closeOnce                 sync.Once
}

// New recovers the sessions a previous run left (see recover.go), starts
// the ones with work in flight, and starts the liveness mark.
func New(cfg Config) (*Registry, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := &Registry{cfg: cfg, sem: make(chan struct{}, cfg.MaxActivations), actors: make(map[string]*actor)}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if cfg.Store != nil {
		if err := r.recoverAll(r.ctx); err != nil {
			r.Close()
			return nil, err
		}
		// Mark at once: a crash within the first tick must still leave a
		// record of when this run was alive.
		if err := r.markAlive(r.ctx); err != nil {
			r.Close()
			return nil, fmt.Errorf("actor: record liveness: %w", err)
		}
		r.every(cfg.AliveInterval, "record liveness", r.markAlive)
		if cfg.SweepInterval > 0 {
			r.every(cfg.SweepInterval, "retention sweep", r.sweep)
		}
	}
	return r, nil
}

// Close shuts every actor down (their clients get 1012), waits for them,
// and records the moment as the node's last alive time. Safe to call twice.
func (r *Registry) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.cancel()
		r.wg.Wait()
		if r.cfg.Store != nil {
			err = r.cfg.Store.MarkAlive(context.Background(), r.cfg.Now())
		}
	})
	return err
}

// Stats returns the registry's counters.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	n := len(r.actors)
	r.mu.Unlock()
	return Stats{Active: n, Activations: r.activations.Load(), Passivations: r.passivations.Load(), ToolRuns: r.toolRuns.Load()}
}

func (r *Registry) sessionConfig() sessionConfig {
	return sessionConfig{Window: r.cfg.Window, IdleTimeout: r.cfg.IdleTimeout, ReauthMaxAge: r.cfg.ReauthMaxAge, Tool: r.cfg.Engine.Tool}
}

// every runs job every interval until Close, in a goroutine of the
// registry's; what fails is logged under what.
func (r *Registry) every(interval time.Duration, what string, job func(context.Context) error) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-t.C:
				if err := job(r.ctx); err != nil && r.ctx.Err() == nil {
					r.cfg.Logger.Error(what, "err", err)
				}
			}
		}
	}()
}

func (r *Registry) markAlive(ctx context.Context) error {
	return r.cfg.Store.MarkAlive(ctx, r.cfg.Now())
}

func (r *Registry) sweep(ctx context.Context) error {
	n, err := r.cfg.Store.Sweep(ctx)
	if n > 0 {
		r.cfg.Logger.Info("retention sweep", "deleted", n)
	}
	return err
}

// get returns the running actor of sid, activating it from the log if
// needed. Concurrent callers share one activation.
func (r *Registry) get(ctx context.Context, sid string) (*actor, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	a, ok := r.actors[sid]
	if !ok {
		a = newActor(r, sid)
		r.actors[sid] = a
	}
	r.mu.Unlock()
	if ok {
		select {
		case <-a.ready:
			return a, a.startErr
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m, err := r.load(ctx, sid)
	r.launch(a, m, err)
	return a, err
}

func (r *Registry) load(ctx context.Context, sid string) (wal.Meta, error) {
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return wal.Meta{}, ctx.Err()
	}
	defer func() { <-r.sem }()
	return r.cfg.Journal.Claim(ctx, sid)
}

// launch starts a's loop with m, or records why it could not start.
func (r *Registry) launch(a *actor, m wal.Meta, err error) {
	if err != nil {
		a.startErr = err
		r.remove(a.sid, a)
		close(a.ready)
		close(a.done)
		return
	}
	r.mu.Lock()
	if r.closed {
		// Close may already be waiting: no actor may start after it.
		r.mu.Unlock()
		_ = r.cfg.Journal.Release(context.Background(), a.sid, m.Epoch)
		r.launch(a, m, ErrClosed)
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	r.activations.Add(1)
	close(a.ready)
	go func() {
		defer r.wg.Done()
		a.loop(m)
	}()
}

func (r *Registry) remove(sid string, a *actor) {
	r.mu.Lock()
	if r.actors[sid] == a {
		delete(r.actors, sid)
		if a.startErr == nil {
			r.passivations.Add(1)
		}
	}
	r.mu.Unlock()
}

// create makes a new, claimed session for user and starts its actor.
func (r *Registry) create(ctx context.Context, user string) (*actor, error) {
	now := r.cfg.Now()
	for range 3 {
		sid := r.cfg.NewID()
		m, err := r.cfg.Journal.Create(ctx, wal.Meta{
			SessionID: sid, UserID: user, Status: wal.StatusActive, CreatedAt: now, LastActiveAt: now,
		})
		if errors.Is(err, wal.ErrExists) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create session: %w", err)
		}
		a := newActor(r, sid)
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			_ = r.cfg.Journal.Release(ctx, sid, m.Epoch)
			return nil, ErrClosed
		}
		r.actors[sid] = a
		r.mu.Unlock()
		r.launch(a, m, nil)
		return a, nil
	}
	return nil, errors.New("create session: could not find a free session id")
}
