package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/bench/netns"
	"github.com/tether-dev/tether/gateway/client"
)

// ErrNeedsCluster: --local N with N > 1 started nodes that did not form
// a cluster (a session made on one node is unknown on another).
var ErrNeedsCluster = errors.New("bench: the local nodes did not form a cluster; --local N > 1 needs clustering (a session made on one node must be resumable on any other)")

// Bench is one load run: local nodes (with --local), simulated users,
// node failures, the verifier and the figures.
type Bench struct {
	cfg   Config
	runID string
	seed  uint64

	dataDir, tmpDir string
	local           *Local
	lab             *netns.Lab   // the nodes' namespaces (--partition-every)
	agentProc       *agentProc   // the endpoint started here (--agent http)
	agent           *directAgent // the direct baseline's (--agent http)
	urls            []string
	tok             *tokens
	ver             *Verifier
	rec             *Recorder
	start           time.Time
	windowNs        atomic.Int64 // the reconnect window, known or reported
	nofile          [2]uint64    // open-file limit after raising: soft, hard
	idleRSS         int64        // the local nodes' RSS before the load

	nodeMu sync.Mutex // one node down at a time
	killMu sync.Mutex
	kills  []*killRec

	warnOnce sync.Map // messages printed once
	printed  atomic.Int64
	// firstDialErr is why a new session could not be started, first time.
	firstDialErr atomic.Pointer[error]
	users        []*user
	closeOnce    sync.Once
	closeErr     error
}

// New checks cfg and prepares a run; Run runs it.
func New(cfg Config) (*Bench, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	// Progress, warnings and violations come from many goroutines.
	cfg.Err = &lockedWriter{w: cfg.Err}
	b := &Bench{cfg: cfg, seed: cfg.Seed}
	if b.seed == 0 {
		b.seed = mrand.Uint64()
	}
	var id [3]byte
	_, _ = rand.Read(id[:])
	b.runID = hex.EncodeToString(id[:])
	b.windowNs.Store(int64(cfg.Window))
	b.ver = NewVerifier(VerifierConfig{Window: cfg.Window, OnViolation: b.printViolation})
	soft, hard, err := raiseNoFile()
	if err != nil {
		cfg.Logger.Warn("could not raise the open-file limit", "err", err)
	}
	b.nofile = [2]uint64{soft, hard}
	return b, nil
}

func (b *Bench) printViolation(v Violation) {
	if n := b.printed.Add(1); n <= 50 {
		fmt.Fprintln(b.cfg.Err, "\r"+v.String())
	} else if n == 51 {
		fmt.Fprintln(b.cfg.Err, "\r… more violations: see the summary and --json")
	}
}

// warn prints msg once.
func (b *Bench) warn(msg string) {
	if _, dup := b.warnOnce.LoadOrStore(msg, true); !dup {
		fmt.Fprintln(b.cfg.Err, "\rbench:", msg)
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// window is the reconnect window: configured, or the one the server
// reported; 0 when not known yet.
func (b *Bench) window() time.Duration { return time.Duration(b.windowNs.Load()) }

func (b *Bench) noteWindow(s float64) {
	if b.cfg.Window == 0 && s > 0 {
		b.windowNs.Store(int64(s * float64(time.Second)))
	}
}

func (b *Bench) toolDelay() time.Duration {
	if b.cfg.Local > 0 {
		return b.cfg.ToolDelay
	}
	return time.Second // a guess for a deployment: only where a mid-tool drop lands
}

// dialError counts a failed TCP dial, and says clearly when the machine
// is out of ports or files.
func (b *Bench) dialError(err error) {
	now := time.Now()
	switch {
	case errors.Is(err, ErrOutOfPorts):
		b.rec.Error("out_of_ports", now)
		b.warn(ErrOutOfPorts.Error())
	case errors.Is(err, ErrOutOfFiles):
		b.rec.Error("out_of_files", now)
		b.warn(fmt.Sprintf("%v (limit %d)", ErrOutOfFiles, b.nofile[0]))
	case errors.Is(err, syscall.ECONNREFUSED):
		b.rec.Error("dial_refused", now)
	default:
		b.rec.Error("dial_failed", now)
	}
}

// Run runs the scenario and returns its report. ctx ending stops the
// load phase early; the drain, the read-back and the report still
// happen (bounded by cfg.Drain). A report with violations is not an
// error: see Report.Passed.
func (b *Bench) Run(ctx context.Context) (*Report, error) {
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	b.checkLimits()
	if b.local != nil {
		b.idleRSS, _ = b.local.Sample(time.Now()) // before any user: the baseline
	}
	b.start = time.Now()
	b.rec = NewRecorder(b.start)
	phase, endPhase := context.WithTimeout(ctx, b.cfg.Duration)
	defer endPhase()
	// The drain context outlives phase and ctx: in-flight sends finish.
	drain, endDrain := context.WithCancel(context.Background())
	defer endDrain()

	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(context.Background())
	bg.Add(1)
	go func() { defer bg.Done(); b.progressLoop(bgCtx) }()
	if b.local != nil {
		bg.Add(1)
		go func() { defer bg.Done(); b.sampleLoop(bgCtx) }()
	}
	var killers sync.WaitGroup
	if b.local != nil {
		for i, kl := range []struct {
			every time.Duration
			sig   syscall.Signal
		}{{b.cfg.KillEvery, syscall.SIGKILL}, {b.cfg.TermEvery, syscall.SIGTERM}, {b.cfg.PauseEvery, syscall.SIGSTOP}} {
			if kl.every > 0 {
				killers.Add(1)
				rng := mrand.New(mrand.NewPCG(b.seed, uint64(1<<40+i)))
				go func() { defer killers.Done(); b.killLoop(phase, kl.every, kl.sig, rng) }()
			}
		}
		if b.lab != nil {
			killers.Add(1)
			rng := mrand.New(mrand.NewPCG(b.seed, uint64(1<<40+3)))
			go func() { defer killers.Done(); b.partitionLoop(phase, rng) }()
		}
	}

	var users sync.WaitGroup
	n := b.cfg.Sessions
	var direct sync.WaitGroup
	if b.agent != nil {
		// As many direct users as bench users, at the same rate and ramp.
		for i := range n {
			direct.Add(1)
			delay := time.Duration(0)
			if n > 1 {
				delay = b.cfg.Ramp * time.Duration(i) / time.Duration(n)
			}
			go func() {
				if sleepCtx(phase, delay) {
					b.directLoop(phase, i, &direct)
				} else {
					direct.Done()
				}
			}()
		}
	}
	for i := range n {
		u := b.newUser(i)
		b.users = append(b.users, u)
		delay := time.Duration(0)
		if n > 1 {
			delay = b.cfg.Ramp * time.Duration(i) / time.Duration(n)
		}
		users.Add(1)
		go func() {
			defer users.Done()
			if sleepCtx(phase, delay) {
				u.loop(phase, drain)
			}
		}()
	}
	<-phase.Done()
	interrupted := ctx.Err() != nil
	killers.Wait() // every node is up again
	drainEnd := time.AfterFunc(b.cfg.Drain, endDrain)
	defer drainEnd.Stop()
	users.Wait()
	direct.Wait()
	b.settle(drain)
	endDrain()
	// Not bounded by the drain: each read-back has its own timeout.
	b.readBack(context.Background())
	stopBG()
	bg.Wait()
	b.closeUsers()
	if p := b.firstDialErr.Load(); p != nil && b.rec.Get(CNewSessions) == 0 {
		return nil, fmt.Errorf("bench: no session could be started: %w", *p)
	}
	rep := b.report(time.Since(b.start), interrupted)
	return rep, b.writeOutputs(rep)
}

// prepare starts the local nodes (or takes the URLs) and the tokens.
func (b *Bench) prepare(ctx context.Context) error {
	cfg := &b.cfg
	if cfg.Local == 0 {
		b.urls = cfg.URLs
		t, err := newTokens([]byte(cfg.JWTSecret), cfg.URLs, cfg.TLS)
		if cfg.DevTokens && cfg.JWTSecret == "" {
			t, err = newTokens(nil, cfg.URLs, cfg.TLS)
		}
		b.tok = t
		return err
	}
	b.dataDir = cfg.DataDir
	if b.dataDir == "" {
		dir, err := os.MkdirTemp("", "tether-bench-")
		if err != nil {
			return fmt.Errorf("bench: data dir: %w", err)
		}
		b.dataDir, b.tmpDir = dir, dir
	}
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	jwt := hex.EncodeToString(secret[:])
	agentURL, agentSecret := cfg.AgentURL, cfg.AgentSecret
	if cfg.Agent == "http" {
		if agentURL == "" {
			var s [16]byte
			_, _ = rand.Read(s[:])
			agentSecret = hex.EncodeToString(s[:])
			if err := os.MkdirAll(b.dataDir, 0o755); err != nil {
				return fmt.Errorf("bench: data dir: %w", err)
			}
			p, err := startAgent(ctx, cfg.Python, cfg.AgentScript, agentSecret, filepath.Join(b.dataDir, "agent.log"),
				cfg.AgentStreamDelay, 20*time.Second)
			if err != nil {
				return err
			}
			b.agentProc, agentURL = p, p.url
		}
		b.agent = newDirectAgent(agentURL, agentSecret)
		if err := b.agent.probe(ctx, b.runID); err != nil {
			return err
		}
	}
	if cfg.PartitionEvery > 0 {
		lab, err := netns.New(ctx, netns.Config{Nodes: cfg.Local, Prefix: "tb"})
		if err != nil {
			return fmt.Errorf("bench: --partition-every runs the nodes in network namespaces: %w", err)
		}
		b.lab = lab
	}
	local, err := NewLocal(ctx, LocalConfig{
		N: cfg.Local, Bin: cfg.ServerBin, Dir: b.dataDir, JWTSecret: jwt, Window: cfg.Window,
		Agent: cfg.Agent, ToolDelay: cfg.ToolDelay, Extra: cfg.ServerArgs,
		AgentURL: agentURL, AgentSecret: agentSecret, Lab: b.lab,
	})
	if err != nil {
		return err
	}
	b.local, b.urls = local, local.URLs()
	b.tok, _ = newTokens([]byte(jwt), nil, nil)
	if cfg.Local > 1 {
		return b.probeCluster(ctx)
	}
	return nil
}

// dial connects to a node: through its namespace with --local in a lab,
// directly otherwise.
func (b *Bench) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if b.local != nil {
		return b.local.DialContext(ctx, network, addr)
	}
	return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
}

// dialer is a WebSocket dialer over dial.
func (b *Bench) dialer() *websocket.Dialer {
	return &websocket.Dialer{NetDialContext: b.dial, HandshakeTimeout: 10 * time.Second}
}

// probeCluster makes a session on the first node and resumes it on each
// other node, retrying for 20s while the cluster settles.
func (b *Bench) probeCluster(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tf := func(ctx context.Context) (string, error) { return b.tok.get(ctx, "bench-probe-"+b.runID) }
	c, err := client.Dial(ctx, client.Config{URLs: b.urls[:1], TokenFunc: tf, MaxAttempts: 20, Dialer: b.dialer()})
	if err != nil {
		return fmt.Errorf("bench: probe session on %s: %w", b.urls[0], err)
	}
	sid := c.SessionID()
	_ = c.Close()
	for _, u := range b.urls[1:] {
		for {
			c, err := client.Dial(ctx, client.Config{URLs: []string{u}, TokenFunc: tf, SessionID: sid, MaxAttempts: 5, Dialer: b.dialer()})
			if err == nil {
				_ = c.Close()
				break
			}
			if ctx.Err() != nil || !errors.Is(err, client.ErrSessionLost) {
				return fmt.Errorf("%w: resuming on %s: %w", ErrNeedsCluster, u, err)
			}
			if !sleepCtx(ctx, 500*time.Millisecond) {
				return fmt.Errorf("%w: resuming on %s: %w", ErrNeedsCluster, u, err)
			}
		}
	}
	return nil
}

func (b *Bench) newUser(i int) *user {
	u := &user{
		b: b, idx: i, name: fmt.Sprintf("bench-%s-u%d", b.runID, i),
		agent: int(float64(i+1)*b.cfg.AgentMix) > int(float64(i)*b.cfg.AgentMix),
		send:  mrand.New(mrand.NewPCG(b.seed, uint64(2*i))),
		chaos: mrand.New(mrand.NewPCG(b.seed, uint64(2*i+1))),
	}
	u.net = newNetSim(b.dial, b.dialError)
	return u
}

// settle waits (within the drain) until every user's current session is
// attached again, or its client has ended.
func (b *Bench) settle(ctx context.Context) {
	var wg sync.WaitGroup
	for _, u := range b.users {
		r := u.current()
		if r == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !r.waitAttached(ctx) {
				select {
				case <-r.c.Done():
					r.ended()
				default:
				}
			}
		}()
	}
	wg.Wait()
}

// closeUsers closes every client still open.
func (b *Bench) closeUsers() {
	for _, u := range b.users {
		u.mu.Lock()
		runs := append([]*run(nil), u.runs...)
		u.mu.Unlock()
		for _, r := range runs {
			_ = r.c.Close()
		}
	}
}

// Close stops the local nodes and removes a temporary data directory
// (kept when the run found violations). Safe to call twice.
func (b *Bench) Close() error {
	b.closeOnce.Do(func() {
		b.closeUsers()
		if b.local != nil {
			b.closeErr = b.local.Close()
		}
		if b.lab != nil {
			b.closeErr = errors.Join(b.closeErr, b.lab.Close())
		}
		if b.agent != nil {
			b.agent.close()
		}
		if b.agentProc != nil {
			b.agentProc.stop()
		}
		if b.tmpDir != "" {
			if b.ver.Total() > 0 {
				fmt.Fprintln(b.cfg.Err, "bench: node data and logs kept in", b.tmpDir)
			} else if err := os.RemoveAll(b.tmpDir); err != nil {
				b.closeErr = errors.Join(b.closeErr, err)
			}
		}
	})
	return b.closeErr
}

// sampleLoop reads the local nodes' RSS and CPU every second.
func (b *Bench) sampleLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	b.local.Sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rss, cpu := b.local.Sample(now)
			b.rec.Nodes(now, rss, cpu)
		}
	}
}
