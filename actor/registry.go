package actor

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"

	"github.com/tether-dev/tether/actor/workers"
)

// Config configures a Registry. Only Journal is required; every other
// field has the default its comment gives.
type Config struct {
	// Journal is where sessions live. Required.
	Journal Journal
	// Store is the local store the boot recovery scans, the liveness mark
	// is kept in and the retention sweep runs on. Default: Journal, if it
	// is one.
	Store Store
	// Owns reports whether this node owns a session now: boot recovery
	// and the count of each user's sessions look only at those. Default:
	// every session (a single node).
	Owns func(sid string) bool
	// Engine answers user messages. Default Echo.
	Engine engine.Engine
	// Window is the reconnect window. Default 5m.
	Window time.Duration
	// Retention keeps expired and completed sessions this long after their
	// last activity before the sweep deletes them. Default 1h.
	Retention time.Duration
	// SweepInterval is how often the retention sweep runs; negative
	// disables it. Default: a quarter of the retention, between 100ms and
	// 1m. The registry runs it, not the store, so that it starts only after
	// boot recovery: a session alive when the node stopped must have its
	// window extended before any sweep looks at it.
	SweepInterval time.Duration
	// ReplayLimit caps the entries of a resume's history_batch. Default 50.
	ReplayLimit int
	// MaxBatchBytes caps the bytes (wal.Entry.Size) of one history_batch,
	// a resume's or a history page's. Default 1 MiB.
	MaxBatchBytes int
	// TailEntries and TailBytes bound the newest entries an active
	// session keeps in memory. Defaults: max(ReplayLimit, 64) entries and
	// 256 KiB (the newest entry is always kept).
	TailEntries, TailBytes int
	// IdleTimeout passivates an actor with no connection and no turn in
	// flight for this long; its state stays in the log. Default 2m.
	IdleTimeout time.Duration
	// HibernateAfter lets a session whose clients are attached but quiet
	// (no frame, no turn, nothing in flight) leave memory after this
	// long: only the connections stay, and the next frame wakes the
	// session with one read of the log (hibernate.go). Default 10s;
	// negative never.
	HibernateAfter time.Duration
	// ReauthMaxAge is how old a token's auth_time may be to resume a
	// sensitive session. Default 5m.
	ReauthMaxAge time.Duration
	// FlushInterval coalesces a streamed reply's parts: after a delta goes
	// out, parts that follow within this interval go out together.
	// Default 50ms; negative sends each part at once.
	FlushInterval time.Duration
	// MaxTurns caps the user messages waiting for the agent in one
	// session; a send beyond it is refused (rate_limited). Default 64.
	MaxTurns int
	// MaxConns caps the connections that share one session (a hello
	// with attach "shared"); one more is refused with ErrTooManyConns.
	// Default 8, as PROTOCOL.md says.
	MaxConns int
	// MaxContextBytes caps a session's user context; a context frame that
	// would grow it beyond is refused (too_large). Default 64 KiB.
	MaxContextBytes int
	// MaxSessionsPerUser caps the live sessions one user has on this node;
	// a new session beyond it is refused (ErrTooManySessions). Resuming is
	// never refused. 0 means 100; negative means no limit.
	MaxSessionsPerUser int
	// MaxActivations caps how many sessions are loaded from the log at
	// once, so a reconnect storm cannot stampede the disk. Default 32.
	MaxActivations int
	// MailboxSize is how many client requests may wait for a session's
	// actor before the client's reader waits. Default 16.
	MailboxSize int
	// AliveInterval is how often the registry records that the node is
	// alive; after a crash, the last mark tells which reconnect windows
	// had already ended. Default 1s.
	AliveInterval time.Duration
	// TickInterval is how often the registry looks for actors whose
	// deadline (window end, passivation, hibernation) has come. Default
	// 1s, or a tenth of the shortest of Window, IdleTimeout and
	// HibernateAfter if that is less (at least 5ms).
	TickInterval time.Duration
	// Clock is the source of time. Default the wall clock.
	Clock Clock
	// NewID makes session ids. Default: 26 base32 characters from
	// crypto/rand (130 random bits).
	NewID func() string
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Journal == nil {
		return errors.New("actor: Config.Journal is required")
	}
	if c.Store == nil {
		c.Store, _ = c.Journal.(Store)
	}
	if c.Owns == nil {
		c.Owns = func(string) bool { return true }
	}
	if c.Engine == nil {
		c.Engine = engine.Echo{}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Window, 5*time.Minute)
	def(&c.Retention, time.Hour)
	def(&c.IdleTimeout, 2*time.Minute)
	def(&c.ReauthMaxAge, 5*time.Minute)
	def(&c.AliveInterval, time.Second)
	if c.HibernateAfter == 0 {
		c.HibernateAfter = 10 * time.Second
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = 50 * time.Millisecond
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = min(max(c.Retention/4, 100*time.Millisecond), time.Minute)
	}
	if c.TickInterval <= 0 {
		c.TickInterval = max(min(time.Second, c.Window/10, c.IdleTimeout/10), 5*time.Millisecond)
		if c.HibernateAfter > 0 {
			c.TickInterval = max(min(c.TickInterval, c.HibernateAfter/10), 5*time.Millisecond)
		}
	}
	defInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	defInt(&c.ReplayLimit, machine.DefaultReplayLimit)
	defInt(&c.MaxBatchBytes, 1<<20)
	defInt(&c.TailEntries, max(c.ReplayLimit, 64))
	defInt(&c.TailBytes, 256<<10)
	defInt(&c.MaxTurns, 64)
	defInt(&c.MaxConns, 8)
	defInt(&c.MaxContextBytes, 64<<10)
	if c.MaxSessionsPerUser == 0 {
		c.MaxSessionsPerUser = 100
	}
	defInt(&c.MaxActivations, 32)
	defInt(&c.MailboxSize, 16)
	if c.Clock == nil {
		c.Clock = realClock{}
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
	Asleep       int    // hibernated sessions: their connections open, nothing else in memory
	Hibernations uint64 // sessions that left memory with their connections kept
	Activations  uint64 // sessions loaded from the log or created
	Passivations uint64 // actors stopped (idle, expired, completed)
	ToolRuns     uint64
	Corrupt      uint64 // session states or contexts that could not be read
}

// Registry activates session actors on demand and keeps track of them.
type Registry struct {
	cfg   Config
	clock Clock
	log   *slog.Logger
	ctx   context.Context // cancelled by Close: turns stop
	stop  context.CancelFunc
	sem   chan struct{}

	mu     sync.Mutex
	actors map[string]*actor
	live   map[string]int // live sessions per user, for MaxSessionsPerUser
	timers map[string]Timer
	closed bool
	// asleep holds what a hibernated session kept: its connections and
	// the newest seq they were shown (hibernate.go).
	asleep map[string]machine.Hibernate

	// The boot pass (recover.go): sessions a previous run left that are
	// not yet recovered, recoveries clients started meanwhile, and the
	// moments recovery measures from.
	pending         map[string]bool
	inflight        sync.WaitGroup
	boot, lastAlive time.Time
	recovered       chan struct{}
	stopRecovery    context.CancelFunc

	wg                        sync.WaitGroup // actor goroutines, jobs, helpers
	workers                   *workers.Pool  // runs actors' drains on grown stacks
	activations, passivations atomic.Uint64
	hibernations              atomic.Uint64
	toolRuns, corrupted       atomic.Uint64
	closeOnce                 sync.Once
	closeErr                  error
}

// New lists the sessions a previous run left and starts recovering them
// in the background (see recover.go; Recovered says when that is done),
// and starts the periodic jobs.
func New(cfg Config) (*Registry, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := &Registry{
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger, sem: make(chan struct{}, cfg.MaxActivations),
		actors: make(map[string]*actor), live: make(map[string]int), timers: make(map[string]Timer),
		asleep:  make(map[string]machine.Hibernate),
		workers: workers.New(workers.Config{}),
	}
	r.ctx, r.stop = context.WithCancel(context.Background())
	r.recovered, r.pending = make(chan struct{}), make(map[string]bool)
	if err := r.startRecovery(); err != nil {
		r.Close()
		return nil, err
	}
	r.every("deadlines", cfg.TickInterval, r.tick)
	return r, nil
}

// Close shuts every actor down (their clients are told to reconnect),
// waits for them, and records the moment as the node's last alive time.
// Safe to call twice.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		if r.stopRecovery != nil {
			r.stopRecovery()
		}
		r.mu.Lock()
		r.closed = true
		for _, t := range r.timers {
			t.Stop()
		}
		actors := make([]*actor, 0, len(r.actors))
		for _, a := range r.actors {
			actors = append(actors, a)
		}
		r.mu.Unlock()
		for _, a := range actors {
			// An actor still activating has no machine yet to take the
			// shutdown: wait until it has one (or failed to get one).
			<-a.ready()
			a.post(machine.Shutdown{})
		}
		for _, a := range actors {
			<-a.done
		}
		r.closeAsleep(machine.CloseShutdown, "node shutting down")
		r.stop()
		r.wg.Wait()
		_ = r.workers.Close() // every drain has ended (r.wg): it only stops parked goroutines
		// Only a run that recovered everything may say it was alive:
		// see recoverPending.
		if r.cfg.Store != nil && isClosed(r.recovered) {
			r.closeErr = r.cfg.Store.MarkAlive(context.Background(), r.clock.Now())
		}
	})
	return r.closeErr
}

// Recovered is closed once the boot pass has recovered every session a
// previous run left (at once without a Store). It stays open if Close
// came first.
func (r *Registry) Recovered() <-chan struct{} { return r.recovered }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Stats returns the registry's counters.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	n, asleep := len(r.actors), len(r.asleep)
	r.mu.Unlock()
	return Stats{
		Active: n, Asleep: asleep, Activations: r.activations.Load(), Passivations: r.passivations.Load(),
		Hibernations: r.hibernations.Load(), ToolRuns: r.toolRuns.Load(), Corrupt: r.corrupted.Load(),
	}
}

// NewID returns a fresh session id (Config.NewID).
func (r *Registry) NewID() string { return r.cfg.NewID() }

func (r *Registry) sessionConfig() machine.Config {
	sc := machine.Config{
		Window: r.cfg.Window, IdleTimeout: r.cfg.IdleTimeout, ReauthMaxAge: r.cfg.ReauthMaxAge, HibernateAfter: max(r.cfg.HibernateAfter, 0),
		MaxTurns: r.cfg.MaxTurns, MaxConns: r.cfg.MaxConns, MaxContextBytes: r.cfg.MaxContextBytes,
		ReplayLimit: r.cfg.ReplayLimit, TailEntries: r.cfg.TailEntries, TailBytes: r.cfg.TailBytes, Tool: r.cfg.Engine.Tool,
		FlushInterval: max(r.cfg.FlushInterval, 0),
	}
	if in, ok := r.cfg.Engine.(engine.Instant); ok {
		sc.Instant = in.Answer
	}
	return sc
}

// every runs job every interval (on the registry's clock) until Close;
// what fails is logged under name.
func (r *Registry) every(name string, interval time.Duration, job func(context.Context) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.timers[name] = r.clock.AfterFunc(interval, func() {
		if !r.hold() {
			return
		}
		defer r.wg.Done()
		if err := job(r.ctx); err != nil && r.ctx.Err() == nil {
			r.log.Error(name, "err", err)
		}
		r.every(name, interval, job)
	})
}

// hold counts one more goroutine Close waits for (r.wg), unless the
// registry is closed; whoever it returns true to calls r.wg.Done.
func (r *Registry) hold() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Add(1)
	return true
}

func (r *Registry) markAlive(ctx context.Context) error {
	return r.cfg.Store.MarkAlive(ctx, r.clock.Now())
}

// tick posts a Tick to every actor whose deadline has come.
func (r *Registry) tick(context.Context) error {
	now := r.clock.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.actors {
		if d := a.deadline.Load(); d != 0 && d <= now {
			a.post(machine.Tick{})
		}
	}
	return nil
}

// get returns the running actor of sid, activating it from the log if
// needed (recovering it first if the boot pass has not yet). Concurrent
// callers share one activation.
func (r *Registry) get(ctx context.Context, sid string) (*actor, error) {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, ErrClosed
		}
		if a, ok := r.actors[sid]; ok {
			r.mu.Unlock()
			select {
			case <-a.ready():
				if errors.Is(a.startErr, errIdle) {
					continue // the boot pass's placeholder: activate afresh
				}
				if a.startErr == nil && a.gone() {
					// Stopping (passivating, hibernating): wait until it
					// has left, then activate afresh.
					select {
					case <-a.done:
						continue
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				return a, a.startErr
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		a := newActor(r, sid)
		r.actors[sid] = a
		needRecovery := r.pending[sid]
		if needRecovery {
			delete(r.pending, sid)
			r.inflight.Add(1)
		}
		r.mu.Unlock()
		var rec *machine.Recover
		if needRecovery {
			rec = r.bootRecover()
		}
		err := r.start(ctx, a, rec, false)
		if needRecovery {
			r.inflight.Done()
		}
		return a, err
	}
}

func (r *Registry) remove(a *actor) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.actors[a.sid] == a {
		delete(r.actors, a.sid)
		if a.startErr == nil {
			r.passivations.Add(1)
		}
	}
}

// ended is told that a session of user ended (completed or expired).
func (r *Registry) ended(user string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live[user] > 1 {
		r.live[user]--
	} else {
		delete(r.live, user)
	}
}

// ActiveIDs returns the ids of the sessions whose actors are in memory,
// and of the hibernated ones (their clients are attached here).
func (r *Registry) ActiveIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.actors)+len(r.asleep))
	for sid := range r.actors {
		ids = append(ids, sid)
	}
	for sid := range r.asleep {
		ids = append(ids, sid)
	}
	return ids
}

// Evict stops the session's actor, if one is in memory: its client is
// told to reconnect (CloseShutdown: the session moved), its turn stops,
// and Evict returns once the actor is gone — its appends done, its claim
// released — so that another node may take the session over. The clients
// of a hibernated session are told the same.
func (r *Registry) Evict(ctx context.Context, sid string) error {
	r.mu.Lock()
	a := r.actors[sid]
	r.mu.Unlock()
	// Whether it sleeps now or falls asleep while being stopped, its
	// clients must not stay attached to a session that moved.
	defer r.closeSleepers(sid, machine.CloseShutdown, "the session moved to another node; reconnect")
	if a == nil {
		return nil
	}
	select {
	case <-a.ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	a.post(machine.Shutdown{})
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Activate loads the session into memory (claiming it) if it is not there
// yet, so that work in flight resumes without waiting for a client.
func (r *Registry) Activate(ctx context.Context, sid string) error {
	_, err := r.get(ctx, sid)
	return err
}
