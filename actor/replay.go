package actor

import (
	"fmt"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/wal"
)

// MaxHistoryLimit caps one history page.
const MaxHistoryLimit = 200

// DefaultHistoryLimit is a history page when the client names no limit.
const DefaultHistoryLimit = 50

// replay sends the one history_batch of a resume: the newest entries after
// e.after, at most ReplayLimit of them and MaxBatchBytes, with a count and
// a summary of the rest. Entries in the tail are not read from the log.
func (a *actor) replay(e effReplay) {
	from := e.after + 1
	if missed := e.last - e.after; missed > uint64(a.reg.cfg.ReplayLimit) {
		from = e.last - uint64(a.reg.cfg.ReplayLimit) + 1
	}
	msgs, err := a.entries(from, e.last+1)
	if err != nil {
		a.readFailed(e.conn, err)
		return
	}
	msgs = a.fitBytes(msgs)
	out := &BatchOut{Messages: msgs}
	if len(msgs) > 0 {
		from = msgs[0].Seq
	}
	if omitted := from - (e.after + 1); omitted > 0 && len(msgs) > 0 {
		out.Omitted = omitted
		first, err := a.entries(e.after+1, e.after+2)
		if err != nil {
			a.readFailed(e.conn, err)
			return
		}
		out.Summary = summarize(e.after+1, from-1, first)
	}
	e.conn.Deliver(out)
}

// fitBytes keeps the newest entries that fit in MaxBatchBytes (at least
// one), so one request can never make the server build more than that.
func (a *actor) fitBytes(msgs []wal.Entry) []wal.Entry {
	total := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		total += msgs[i].Size()
		if total > a.reg.cfg.MaxBatchBytes && i < len(msgs)-1 {
			return msgs[i+1:]
		}
	}
	return msgs
}

// summarize describes the omitted entries lo..hi without reading them all:
// their range, how to page them, and how the stretch began.
func summarize(lo, hi uint64, first []wal.Entry) string {
	s := fmt.Sprintf("%d earlier entries (seq %d–%d) are not shown; page them with history before_seq=%d.", hi-lo+1, lo, hi, hi+1)
	if len(first) == 1 {
		s += fmt.Sprintf(" They begin with %s: %q.", first[0].Role, engine.Clip(first[0].Content, 80))
	}
	return s
}

// history answers a history request with one page: the newest entries
// before e.before, at most its limit (default 50, at most 200) and
// MaxBatchBytes.
func (a *actor) history(e effHistory) {
	limit := e.limit
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	limit = min(limit, MaxHistoryLimit)
	before := e.before
	if last := a.s.durableSeq(); before == 0 || before > last+1 {
		before = last + 1
	}
	lo := before - min(before-1, uint64(limit))
	msgs, err := a.entries(lo, before)
	if err != nil {
		a.readFailed(e.conn, err)
		return
	}
	msgs = a.fitBytes(msgs)
	out := &BatchOut{Messages: msgs}
	if len(msgs) > 0 {
		out.Omitted = msgs[0].Seq - 1
	}
	e.conn.Deliver(out)
}

// readFailed reports a log that cannot be read at all (the store failed):
// the client gets an internal error and 1011; the session's data is left
// as it is.
func (a *actor) readFailed(c Conn, err error) {
	a.reg.log.Error("read session log", "session", a.sid, "err", err)
	c.Deliver(&ErrorOut{Code: CodeInternal, Message: "reading the session failed"})
	c.Close(CloseInternal, "internal error")
}
