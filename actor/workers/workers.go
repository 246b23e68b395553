package workers

import (
	"sync"
	"sync/atomic"
)

// Config configures a Pool.
type Config struct {
	// MaxIdle is how many finished goroutines are kept parked for the next
	// task; one more finishing then exits. Default 64: parked goroutines
	// cost their (grown) stacks, tens of KiB each, whatever the number of
	// sessions.
	MaxIdle int
}

// Pool hands tasks to parked goroutines, starting one when none is free.
// Its methods are safe for concurrent use.
type Pool struct {
	maxIdle int
	mu      sync.Mutex
	idle    []chan func() // parked goroutines, the most recently parked last
	closed  bool
	wg      sync.WaitGroup
	tasks   atomic.Uint64
}

// New returns a Pool.
func New(cfg Config) *Pool {
	if cfg.MaxIdle <= 0 {
		cfg.MaxIdle = 64
	}
	return &Pool{maxIdle: cfg.MaxIdle}
}

// Go runs task on a parked goroutine, or on a new one. It never blocks.
// After Close, task runs on a goroutine of its own.
func (p *Pool) Go(task func()) {
	p.tasks.Add(1)
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		// The most recently parked goroutine: its stack is the likeliest
		// to be still grown (the garbage collector shrinks idle ones).
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w <- task // buffered: never blocks
		return
	}
	if p.closed {
		p.mu.Unlock()
		go task()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go p.run(task)
}

// run runs tasks until the pool has enough parked goroutines or closes.
func (p *Pool) run(task func()) {
	defer p.wg.Done()
	p.loop(task)
}

// stackHold is the frame the goroutine's tasks run above and it parks in.
const stackHold = 8 << 10

// loop is run's loop, in a frame of stackHold bytes. The garbage
// collector halves the stack of a goroutine that uses less than a quarter
// of it, so a goroutine parked in a small frame lost the stack it had
// grown and grew it again, copying it at each doubling, on its next task
// (3% of the server's CPU under load). Parked this deep, it keeps a stack
// of up to 4×stackHold whole; MaxIdle bounds what that holds. The frame is
// zeroed once per goroutine, not once per task.
//
//go:noinline
func (p *Pool) loop(task func()) {
	var hold [stackHold]byte
	use(&hold)
	w := make(chan func(), 1)
	for task != nil {
		task()
		p.mu.Lock()
		if p.closed || len(p.idle) >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		task = <-w
	}
}

// use keeps hold a real frame: the compiler drops an unused array.
//
//go:noinline
func use(b *[stackHold]byte) { b[0] = 1 }

// Tasks reports how many tasks Go was given.
func (p *Pool) Tasks() uint64 { return p.tasks.Load() }

// Idle reports how many goroutines are parked.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// Close stops the parked goroutines and waits for every goroutine of the
// pool to finish its task and exit. Tasks submitted later run on
// goroutines of their own. Safe to call more than once.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, w := range idle {
		w <- nil
	}
	p.wg.Wait()
	return nil
}
