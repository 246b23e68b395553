package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tether-dev/tether/gateway/client"
	"github.com/tether-dev/tether/gateway/wire"
)

// readTimeout bounds the read-back of one session.
const readTimeout = 30 * time.Second

// readBack reads every session that did not expire again, from seq 1,
// through a random node, and hands each log to the verifier.
func (b *Bench) readBack(ctx context.Context) {
	var jobs []*run
	for _, u := range b.users {
		u.mu.Lock()
		for _, r := range u.runs {
			r.mu.Lock()
			if !r.final {
				jobs = append(jobs, r)
			}
			r.mu.Unlock()
		}
		u.mu.Unlock()
	}
	rng := newRand(b.seed, 1<<41)
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	ch := make(chan *run)
	var wg sync.WaitGroup
	for range min(b.cfg.Workers, max(len(jobs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range ch {
				b.readOne(ctx, r)
			}
		}()
	}
	for _, r := range jobs {
		ch <- r
	}
	close(ch)
	wg.Wait()
}

// readOne closes the user's client, then at once reads its session back:
// the session waits for the read-back, within any window.
func (b *Bench) readOne(ctx context.Context, r *run) {
	r.mu.Lock()
	connected, lostAt := r.connected, r.lostAt
	r.mu.Unlock()
	_ = r.c.Close()
	<-r.readDone
	var away time.Duration
	if !connected {
		away = time.Since(lostAt)
	}
	log, frame, err := b.fetch(ctx, r.u, r.sid)
	if frame != nil && !frame.Resumed {
		b.ver.Feed(r.sid, Event{Kind: EvResume, Frame: *frame, Away: away})
	}
	r.mu.Lock()
	r.final = true
	r.mu.Unlock()
	b.ver.Feed(r.sid, Event{Kind: EvFinal, Log: log, Err: err})
}

// fetch resumes session sid from seq 0 with a fresh client (which pages
// in what one history_batch does not hold) and reads it up to the
// last_seq its session frame reported, then a while longer for replies
// still owed.
func (b *Bench) fetch(ctx context.Context, u *user, sid string) ([]wire.Message, *wire.SessionFrame, error) {
	// Generous: on a loaded machine a reply may be owed for a while, and
	// the wait costs time only when a reply is missing.
	answerWait := 15*time.Second + 2*b.toolDelay()
	ctx, cancel := context.WithTimeout(ctx, readTimeout+answerWait)
	defer cancel()
	var mu sync.Mutex
	var frame *wire.SessionFrame
	urls := append([]string(nil), b.urls...)
	rng := newRand(b.seed, uint64(1<<42+u.idx))
	rng.Shuffle(len(urls), func(i, j int) { urls[i], urls[j] = urls[j], urls[i] })
	c, err := client.Dial(ctx, client.Config{
		URLs: urls, SessionID: sid, MaxBackoff: b.cfg.MaxBackoff, TLS: b.cfg.TLS, Dialer: b.dialer(),
		TokenFunc: func(ctx context.Context) (string, error) { return b.tok.get(ctx, u.name) },
		OnSession: func(f wire.SessionFrame) {
			mu.Lock()
			if frame == nil {
				frame = &f
			}
			mu.Unlock()
		},
	})
	mu.Lock()
	fr := frame
	mu.Unlock()
	if err != nil {
		return nil, fr, fmt.Errorf("resume from seq 0: %w", err)
	}
	defer c.Close()
	target := fr.LastSeq
	var log []wire.Message
	var last uint64
	owed := make(map[uint64]bool) // user entries without a reply yet
	var answerBy <-chan time.Time
	for {
		if last >= target {
			if len(owed) == 0 {
				return log, fr, nil
			}
			if answerBy == nil {
				t := time.NewTimer(answerWait)
				defer t.Stop()
				answerBy = t.C
			}
		}
		select {
		case m, ok := <-c.Messages():
			if !ok {
				return log, fr, fmt.Errorf("read back stopped after %d of %d entries: %v", len(log), target, c.Err())
			}
			log, last = append(log, m), m.Seq
			switch m.Role {
			case wire.RoleUser:
				owed[m.Seq] = true
			case wire.RoleAgent, wire.RoleSystem:
				delete(owed, metaSeq(m.Metadata["reply_to"]))
			}
		case <-answerBy:
			return log, fr, nil // the verifier names what is unanswered
		case <-ctx.Done():
			return log, fr, fmt.Errorf("read back timed out after %d of %d entries", len(log), target)
		}
	}
}
