package actor

import (
	"fmt"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// read returns the entries of sp: the older ones from the journal, the
// newest as the machine held them.
func (a *actor) read(sp machine.Span) ([]wal.Entry, error) { return a.reg.read(a.sid, sp) }

// read returns the entries of sid's span sp.
func (r *Registry) read(sid string, sp machine.Span) ([]wal.Entry, error) {
	lo, hi := sp.Missing()
	if lo >= hi {
		return sp.Held, nil
	}
	older, err := r.cfg.Journal.Read(sid, lo, hi, int(hi-lo), false)
	if err != nil {
		return nil, err
	}
	return append(older, sp.Held...), nil
}

// replay sends the one history_batch of a resume: the newest entries
// after e.After, at most ReplayLimit of them (the machine bounded the
// span) and MaxBatchBytes, with a count and a summary of the rest.
func (a *actor) replay(e machine.Replay) {
	msgs, err := a.read(e.Messages)
	if err != nil {
		a.readFailed(e.Conn, err)
		return
	}
	msgs = fitBytes(msgs, a.reg.cfg.MaxBatchBytes)
	out := &machine.BatchOut{Messages: msgs}
	from := e.Messages.Lo
	if len(msgs) > 0 {
		from = msgs[0].Seq
	}
	if omitted := from - (e.After + 1); omitted > 0 && len(msgs) > 0 {
		out.Omitted = omitted
		first, err := a.read(e.First)
		if err != nil {
			a.readFailed(e.Conn, err)
			return
		}
		out.Summary = summarize(e.After+1, from-1, first)
	}
	e.Conn.Deliver(out)
}

// history answers a history request with one page (the machine bounded
// it by the request's limit), at most MaxBatchBytes.
func (a *actor) history(e machine.History) {
	msgs, err := a.read(e.Messages)
	if err != nil {
		a.readFailed(e.Conn, err)
		return
	}
	msgs = fitBytes(msgs, a.reg.cfg.MaxBatchBytes)
	out := &machine.BatchOut{Messages: msgs}
	if len(msgs) > 0 {
		out.Omitted = msgs[0].Seq - 1
	}
	e.Conn.Deliver(out)
}

// fitBytes keeps the newest entries that fit in limit bytes (at least
// one), so one request can never make the server build more than that.
func fitBytes(msgs []wal.Entry, limit int) []wal.Entry {
	total := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		total += msgs[i].Size()
		if total > limit && i < len(msgs)-1 {
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

// readFailed reports a log that cannot be read at all (the store failed):
// the client gets an internal error and 1011; the session's data is left
// as it is.
func (a *actor) readFailed(c machine.Conn, err error) {
	a.reg.log.Error("read session log", "session", a.sid, "err", err)
	c.Deliver(&machine.ErrorOut{Code: machine.CodeInternal, Message: "reading the session failed"})
	c.Close(machine.CloseInternal, "internal error")
}
