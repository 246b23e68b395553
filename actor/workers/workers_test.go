package workers

import (
	"runtime"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReuse: a finished goroutine is parked and takes the next task; no
// more than MaxIdle are parked; Close stops them (goleak checks).
func TestReuse(t *testing.T) {
	p := New(Config{MaxIdle: 2})
	defer p.Close()

	// One task at a time: the same goroutine runs them all.
	ids := map[chan func()]bool{}
	for range 10 {
		done := make(chan struct{})
		p.Go(func() { close(done) })
		<-done
		waitIdle(t, p, 1)
		p.mu.Lock()
		ids[p.idle[0]] = true
		p.mu.Unlock()
	}
	if len(ids) != 1 {
		t.Fatalf("10 tasks one after another ran on %d goroutines, want 1", len(ids))
	}
	if got := p.Tasks(); got != 10 {
		t.Fatalf("Tasks() = %d after 10 tasks", got)
	}

	// Five at once need five goroutines; two stay parked afterwards.
	var started, release sync.WaitGroup
	started.Add(5)
	release.Add(1)
	var ran sync.WaitGroup
	ran.Add(5)
	for range 5 {
		p.Go(func() {
			defer ran.Done()
			started.Done()
			release.Wait()
		})
	}
	started.Wait() // all five run at once: none waited for another
	release.Done()
	ran.Wait()
	waitIdle(t, p, 2)
}

// TestAfterClose: a task submitted after Close still runs.
func TestAfterClose(t *testing.T) {
	p := New(Config{})
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if p.Idle() != 0 {
		t.Fatalf("%d goroutines parked after Close", p.Idle())
	}
	var wg sync.WaitGroup
	wg.Add(1)
	p.Go(wg.Done)
	wg.Wait()
}

// waitIdle waits until n goroutines are parked: a goroutine parks right
// after its task returns, so the test waits for that step alone.
func waitIdle(t *testing.T, p *Pool, n int) {
	t.Helper()
	for range 1_000_000 {
		if p.Idle() == n {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("%d goroutines parked, want %d", p.Idle(), n)
}
