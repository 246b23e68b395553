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

// readStored returns the entries of sp: the older ones as the journal
// stores them (sent on undecoded), the newest as the machine held them.
func (a *actor) readStored(sp machine.Span) ([]wal.RawEntry, []wal.Entry, error) {
	lo, hi := sp.Missing()
	if lo >= hi {
		return nil, sp.Held, nil
	}
	older, err := a.reg.cfg.Journal.ReadRaw(a.sid, lo, hi, int(hi-lo), false)
	if err != nil {
		return nil, nil, err
	}
	return older, sp.Held, nil
}

// replay sends the one history_batch of a resume: the newest entries
// after e.After, at most ReplayLimit of them (the machine bounded the
// span) and MaxBatchBytes, with a count and a summary of the rest.
func (a *actor) replay(e machine.Replay) {
	out, err := a.batch(e.Messages)
	if err != nil {
		a.readFailed(e.Conn, err)
		return
	}
	from, some := out.First()
	if !some {
		from = e.Messages.Lo
	}
	if omitted := from - (e.After + 1); omitted > 0 && some {
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
	out, err := a.batch(e.Messages)
	if err != nil {
		a.readFailed(e.Conn, err)
		return
	}
	if first, some := out.First(); some {
		out.Omitted = first - 1
	}
	e.Conn.Deliver(out)
}

// batch reads sp into a history_batch of its newest entries that fit in
// MaxBatchBytes.
func (a *actor) batch(sp machine.Span) (*machine.BatchOut, error) {
	stored, held, err := a.readStored(sp)
	if err != nil {
		return nil, err
	}
	if sp.HeldBytes+storedBytes(stored) > a.reg.cfg.MaxBatchBytes {
		stored, held = fitBytes(stored, held, a.reg.cfg.MaxBatchBytes)
	}
	return &machine.BatchOut{Stored: stored, Messages: held}, nil
}

// storedBytes is the size of stored entries as fitBytes counts it.
func storedBytes(stored []wal.RawEntry) int {
	n := 0
	for i := range stored {
		n += stored[i].Size()
	}
	return n
}

// fitBytes keeps the newest entries of stored followed by held that fit
// in limit bytes (at least one), so one request can never make the
// server build more than that.
func fitBytes(stored []wal.RawEntry, held []wal.Entry, limit int) ([]wal.RawEntry, []wal.Entry) {
	size := func(i int) int {
		if i < len(stored) {
			return stored[i].Size()
		}
		return held[i-len(stored)].Size()
	}
	n, total := len(stored)+len(held), 0
	for i := n - 1; i >= 0; i-- {
		if total += size(i); total > limit && i < n-1 {
			if i+1 >= len(stored) {
				return nil, held[i+1-len(stored):]
			}
			return stored[i+1:], held
		}
	}
	return stored, held
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
