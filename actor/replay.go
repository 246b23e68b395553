package actor

import (
	"fmt"
	"unicode/utf8"

	"github.com/tether-dev/tether/wal"
)

// MaxHistoryLimit caps one history page.
const MaxHistoryLimit = 200

// DefaultHistoryLimit is a history page when the client names no limit.
const DefaultHistoryLimit = 50

// replay sends the one history_batch of a resume: the newest ReplayLimit
// of the entries after e.after, and a count and summary of the rest.
func (a *actor) replay(e effReplay) {
	limit := uint64(a.reg.cfg.ReplayLimit)
	missed := e.last - e.after
	from := e.after
	var omitted uint64
	if missed > limit {
		omitted = missed - limit
		from = e.last - limit
	}
	msgs, err := a.reg.cfg.Journal.ReadAfter(a.sid, from, int(limit))
	if err != nil {
		a.readFailed(e.conn, err)
		return
	}
	out := &BatchOut{Messages: msgs, Omitted: omitted}
	if omitted > 0 {
		first, err := a.reg.cfg.Journal.ReadAfter(a.sid, e.after, 1)
		if err != nil {
			a.readFailed(e.conn, err)
			return
		}
		out.Summary = summarize(e.after+1, from, first)
	}
	e.conn.Deliver(out)
}

// summarize describes the omitted entries lo..hi without reading them all:
// their range, how to page them, and how the stretch began.
func summarize(lo, hi uint64, first []wal.Entry) string {
	s := fmt.Sprintf("%d earlier entries (seq %d–%d) are not shown; page them with history before_seq=%d.", hi-lo+1, lo, hi, hi+1)
	if len(first) == 1 {
		s += fmt.Sprintf(" They begin with %s: %q.", first[0].Role, clip(first[0].Content, 80))
	}
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// history answers a history request with one page.
func (a *actor) history(e effHistory) {
	limit := e.limit
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	limit = min(limit, MaxHistoryLimit)
	before := e.before
	if last := a.s.Meta().LastSeq; before == 0 || before > last+1 {
		before = last + 1
	}
	msgs, err := a.reg.cfg.Journal.ReadBefore(a.sid, before, limit)
	if err != nil {
		a.readFailed(e.conn, err)
		return
	}
	out := &BatchOut{Messages: msgs}
	if len(msgs) > 0 {
		out.Omitted = msgs[0].Seq - 1
	}
	e.conn.Deliver(out)
}

// readFailed reports a log that cannot be read (corruption): the client
// gets an internal error and 1011; the session's data is left as it is.
func (a *actor) readFailed(c Conn, err error) {
	a.reg.cfg.Logger.Error("read session log", "session", a.sid, "err", err)
	c.Deliver(&ErrorOut{Code: "internal", Message: "reading the session failed"})
	c.Close(CloseInternal, "internal error")
}
