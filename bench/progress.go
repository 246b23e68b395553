package bench

import (
	"context"
	"fmt"
	"time"
)

// progressLoop prints a progress line: rewritten in place every second
// on a terminal, a plain line every cfg.Progress otherwise.
func (b *Bench) progressLoop(ctx context.Context) {
	every := b.cfg.Progress
	if b.cfg.ErrIsTerminal {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	prev, prevAt := b.rec.Snapshot().Counts, b.start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cur := b.rec.Snapshot().Counts
			line := b.progressLine(now, prev, cur, now.Sub(prevAt))
			prev, prevAt = cur, now
			if b.cfg.ErrIsTerminal {
				fmt.Fprintf(b.cfg.Err, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(b.cfg.Err, line)
			}
		}
	}
}

func (b *Bench) progressLine(now time.Time, prev, cur map[string]int64, dt time.Duration) string {
	rate := func(name string) float64 {
		if dt <= 0 {
			return 0
		}
		return float64(cur[name]-prev[name]) / dt.Seconds()
	}
	_, p99 := b.rec.Last(now)
	elapsed := now.Sub(b.start)
	stage := "load"
	if elapsed > b.cfg.Duration {
		stage = "drain+verify"
	}
	b.killMu.Lock()
	kills := len(b.kills)
	b.killMu.Unlock()
	return fmt.Sprintf("[%4.0fs %s] %.0f sends/s, ack p99 %.1fms, %.0f replies/s, %.1f resumes/s (%d in all), %d expired, %d node faults, %d errors, %d violations",
		elapsed.Seconds(), stage, rate(CSends), p99, rate(CReplies), rate(CResumes), cur[CResumes],
		cur[CExpired], kills, cur[CErrors], b.ver.Total())
}
