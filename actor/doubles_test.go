package actor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/actor/machine/machinetest"

	"github.com/tether-dev/tether/wal"
)

// Test doubles exist only for the two sides the actor does not own: the
// client connection (the gateway's) and the agent (engines and tools).
// The journal wrappers below delegate to a real *wal.Log: they count
// calls, or hold and fail them on demand, the way a slow or failing disk
// would.

// ---- connections ----

// recConn records what the actor tells a client. Deliver and Close never
// block.
type recConn struct {
	name   string
	mu     sync.Mutex
	outs   []machine.Out
	closes []machine.CloseReason
	read   int // outs consumed by next
	notify chan struct{}
	stored atomic.Int64 // batch entries delivered as the log stores them
}

func newRecConn(name string) *recConn {
	return &recConn{name: name, notify: make(chan struct{}, 1)}
}

func (c *recConn) Deliver(o machine.Out) {
	if b, ok := o.(*machine.BatchOut); ok {
		// Tests read a batch's entries as values; stored counts those
		// that came as the log stores them.
		c.stored.Add(int64(len(b.Stored)))
		var err error
		if o, err = b.Decoded(); err != nil {
			o = &machine.ErrorOut{Message: "a batch that does not decode: " + err.Error()}
		}
	}
	c.mu.Lock()
	c.outs = append(c.outs, o)
	c.mu.Unlock()
	c.poke()
}

func (c *recConn) Close(why machine.CloseReason, _ string) {
	c.mu.Lock()
	c.closes = append(c.closes, why)
	c.mu.Unlock()
	c.poke()
}

func (c *recConn) poke() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *recConn) String() string { return c.name }

// waitUntil waits until cond (called with c.mu held) holds.
func (c *recConn) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.notify:
		case <-deadline.C:
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("%s: timed out waiting for %s; got %s, closes %v", c.name, what, dumpOuts(c.outs), c.closes)
		}
	}
}

// next returns the next frame not consumed yet, waiting for it.
func (c *recConn) next(t *testing.T) machine.Out {
	t.Helper()
	c.waitUntil(t, "a frame", func() bool { return len(c.outs) > c.read })
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.outs[c.read]
	c.read++
	return o
}

func (c *recConn) unread() []machine.Out {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.outs[c.read:])
}

func (c *recConn) all() []machine.Out {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.outs)
}

func (c *recConn) closeReasons() []machine.CloseReason {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.closes)
}

func (c *recConn) waitClosed(t *testing.T, why machine.CloseReason) {
	t.Helper()
	c.waitUntil(t, fmt.Sprintf("close %d", why), func() bool { return slices.Contains(c.closes, why) })
}

// expect returns the next frame, which must be a T.
func expect[T machine.Out](t *testing.T, c *recConn) T {
	t.Helper()
	o := c.next(t)
	v, ok := o.(T)
	if !ok {
		var z T
		t.Fatalf("%s: got %s, want %T", c.name, dumpOuts([]machine.Out{o}), z)
	}
	return v
}

// stallConn blocks in Deliver once armed, until released: it stands for an
// actor busy for a while, so that events pile up in its mailbox.
type stallConn struct {
	*recConn
	armed   atomic.Bool
	stalled chan struct{} // closed when Deliver first blocks
	gate    chan struct{}
	once    sync.Once
	release func()
}

func newStallConn(name string) *stallConn {
	c := &stallConn{recConn: newRecConn(name), stalled: make(chan struct{}), gate: make(chan struct{})}
	var once sync.Once
	c.release = func() { once.Do(func() { close(c.gate) }) }
	return c
}

func (c *stallConn) Deliver(o machine.Out) {
	if c.armed.Load() {
		c.once.Do(func() { close(c.stalled) })
		<-c.gate
	}
	c.recConn.Deliver(o)
}

// ---- engines and tools ----

// gate is a tool run the test controls: each run announces itself on
// started and ends when the test sends a result on results (or its
// context ends).
type gate struct {
	runs      atomic.Int32
	cancelled atomic.Int32
	started   chan toolRun
	results   chan string
	progress  chan string
}

// toolRun is what a gated run was called with.
type toolRun struct {
	Name string
	Args map[string]any
}

func newGate() *gate {
	return &gate{started: make(chan toolRun, 16), results: make(chan string), progress: make(chan string)}
}

func (g *gate) run(name string) func(context.Context, map[string]any, func(string)) (string, error) {
	return func(ctx context.Context, args map[string]any, progress func(string)) (string, error) {
		g.runs.Add(1)
		g.started <- toolRun{Name: name, Args: args}
		for {
			select {
			case p := <-g.progress:
				progress(p)
			case res := <-g.results:
				return res, nil
			case <-ctx.Done():
				g.cancelled.Add(1)
				return "", ctx.Err()
			}
		}
	}
}

// gatedEngine is the demo agent with tools the test controls: a message
// mentioning "pay" calls the sensitive payment tool, any other calls
// search; the reply quotes the tool's result. With holdNext set, Next
// of a message mentioning "slow" first waits for a value on it (a slow
// model). With approvePay set, the payment tool declares that it needs
// approval.
type gatedEngine struct {
	g          *gate
	idempotent bool
	approvePay bool
	holdNext   chan struct{}
	nexts      atomic.Int32
}

var _ engine.Engine = (*gatedEngine)(nil)

func newGatedEngine(idempotent bool) *gatedEngine {
	return &gatedEngine{g: newGate(), idempotent: idempotent}
}

func (e *gatedEngine) Next(ctx context.Context, in engine.TurnInput) (engine.Action, error) {
	e.nexts.Add(1)
	if e.holdNext != nil && strings.Contains(in.User.Content, "slow") {
		select {
		case <-e.holdNext:
		case <-ctx.Done():
			return engine.Action{}, ctx.Err()
		}
	}
	text := in.User.Content
	if len(in.Steps) == 0 {
		if strings.Contains(text, "pay") {
			return engine.Action{Call: &engine.Call{Name: "payment", Args: map[string]any{"memo": text}}}, nil
		}
		return engine.Action{Call: &engine.Call{Name: "search", Args: map[string]any{"query": text}}}, nil
	}
	last := in.Steps[len(in.Steps)-1]
	if st := machinetest.MetaString(last, "status"); st == engine.ToolFailed || st == engine.ToolDenied {
		return engine.Action{Reply: fmt.Sprintf("the %s did not finish (%s)", machinetest.MetaString(last, "name"), last.Content)}, nil
	}
	return engine.Action{Reply: fmt.Sprintf("about %q: %s", text, last.Content), AgentContext: map[string]any{"last": text}}, nil
}

func (e *gatedEngine) Tool(name string) (engine.Tool, bool) {
	switch name {
	case "search":
		return engine.Tool{Name: name, Idempotent: e.idempotent, Run: e.g.run(name)}, true
	case "payment":
		return engine.Tool{Name: name, Sensitive: true, Approval: e.approvePay, Run: e.g.run(name)}, true
	}
	return engine.Tool{}, false
}

// ---- journals ----

// testJournal is a real log with knobs: it counts the reads the actor
// makes, can hold appends (the disk is slow: they are queued to the log
// only on release), can fail appends (the disk failed), and can hold the
// next Claim.
type testJournal struct {
	*wal.Log
	reads, sendSeqs, scans, loads, headers, claims, appends atomic.Int64

	mu       sync.Mutex
	holding  bool
	held     []heldBatch
	failNext int  // appends to fail from now on
	failSync bool // fail by returning the error rather than through done

	claimGate    chan struct{} // when set, the next Claim waits for it
	claimArrived chan string
	created      func(sid string) // when set, called once a Create has stored the session
	// Claims under way, and the most that were at once.
	claiming, mostClaiming int
}

type heldBatch struct {
	ctx  context.Context
	b    *wal.Batch
	done func(error)
}

var errDisk = errors.New("injected disk failure")

func newTestJournal(l *wal.Log) *testJournal { return &testJournal{Log: l} }

func (j *testJournal) resetCounts() {
	for _, c := range []*atomic.Int64{&j.reads, &j.sendSeqs, &j.scans, &j.loads, &j.headers, &j.claims, &j.appends} {
		c.Store(0)
	}
}

// storeReads is every read of session data the actor made.
func (j *testJournal) storeReads() string {
	return fmt.Sprintf("Read %d, SendSeq %d, ScanSends %d, Load %d", j.reads.Load(), j.sendSeqs.Load(), j.scans.Load(), j.loads.Load())
}

func (j *testJournal) Read(sid string, lo, hi uint64, limit int, newest bool) ([]wal.Entry, error) {
	j.reads.Add(1)
	return j.Log.Read(sid, lo, hi, limit, newest)
}

func (j *testJournal) ReadRaw(sid string, lo, hi uint64, limit int, newest bool) ([]wal.RawEntry, error) {
	j.reads.Add(1)
	return j.Log.ReadRaw(sid, lo, hi, limit, newest)
}

func (j *testJournal) SendSeq(sid, id string) (uint64, bool, error) {
	j.sendSeqs.Add(1)
	return j.Log.SendSeq(sid, id)
}

func (j *testJournal) ScanSends(sid string, fn func(string, uint64)) error {
	j.scans.Add(1)
	return j.Log.ScanSends(sid, fn)
}

func (j *testJournal) Load(sid string) (wal.SessionData, error) {
	j.loads.Add(1)
	return j.Log.Load(sid)
}

func (j *testJournal) Header(sid string) (wal.Header, error) {
	j.headers.Add(1)
	return j.Log.Header(sid)
}

func (j *testJournal) Create(ctx context.Context, h wal.Header, context []byte) (wal.Header, error) {
	hdr, err := j.Log.Create(ctx, h, context)
	j.mu.Lock()
	created := j.created
	j.mu.Unlock()
	if err == nil && created != nil {
		created(hdr.SessionID)
	}
	return hdr, err
}

func (j *testJournal) Claim(ctx context.Context, sid string) (wal.SessionData, error) {
	j.claims.Add(1)
	j.mu.Lock()
	g, arrived := j.claimGate, j.claimArrived
	j.claimGate = nil
	j.claiming++
	j.mostClaiming = max(j.mostClaiming, j.claiming)
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.claiming--
		j.mu.Unlock()
	}()
	if g != nil {
		arrived <- sid
		select {
		case <-g:
		case <-ctx.Done():
			return wal.SessionData{}, ctx.Err()
		}
	}
	return j.Log.Claim(ctx, sid)
}

// claimsAtOnce is the most Claims that were under way at once.
func (j *testJournal) claimsAtOnce() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mostClaiming
}

// holdClaim makes the next Claim wait until the returned func is called;
// the channel tells when it arrived.
func (j *testJournal) holdClaim() (<-chan string, func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	g, arrived := make(chan struct{}), make(chan string, 1)
	j.claimGate, j.claimArrived = g, arrived
	var once sync.Once
	return arrived, func() { once.Do(func() { close(g) }) }
}

func (j *testJournal) AppendAsync(ctx context.Context, b *wal.Batch, done func(error)) error {
	j.appends.Add(1)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failNext > 0 {
		j.failNext--
		if j.failSync {
			return errDisk
		}
		done(errDisk)
		return nil
	}
	if j.holding {
		j.held = append(j.held, heldBatch{ctx, b, done})
		return nil
	}
	return j.Log.AppendAsync(ctx, b, done)
}

func (j *testJournal) hold() {
	j.mu.Lock()
	j.holding = true
	j.mu.Unlock()
}

func (j *testJournal) heldCount() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.held)
}

// release queues the held appends to the log, in order, and stops holding.
func (j *testJournal) release() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.holding = false
	for _, h := range j.held {
		if err := j.Log.AppendAsync(h.ctx, h.b, h.done); err != nil {
			h.done(err)
		}
	}
	j.held = nil
}

func (j *testJournal) failAppends(n int, sync bool) {
	j.mu.Lock()
	j.failNext, j.failSync = n, sync
	j.mu.Unlock()
}

// countingStore counts the retention sweeps run on a real log.
type countingStore struct {
	*wal.Log
	sweeps atomic.Int32
}

func (s *countingStore) Sweep(ctx context.Context, now time.Time, retention time.Duration) (int, error) {
	defer s.sweeps.Add(1)
	return s.Log.Sweep(ctx, now, retention)
}
