package machine

import (
	"slices"
	"time"

	"github.com/tether-dev/tether/wal/record"
)

// Hibernation: a session whose clients are attached but quiet leaves
// memory while their connections stay open (Cloudflare's Durable Objects
// do the same). After HibernateAfter with no event, no work in flight and
// nothing owed, a Tick offers it to the runner: the Hibernate effect names
// the attached connections and the newest seq they were shown. The
// machine itself changes nothing — the runner decides (it may not: mail
// may have come meanwhile) and, if it does, drops the machine; the next
// Tick offers again otherwise. The session's next activation (the next
// frame of one of those clients, or anything else that activates it)
// starts with a Rejoin, which attaches them again without a word to them.

// hibernatable reports whether the session may leave memory with its
// connections kept: attached, active, nothing in flight or held, no turn
// owed, no reply being streamed, no tool call pending (not even one that
// waits for approval: its turn is still open).
func (s *Machine) hibernatable() bool {
	return s.cfg.HibernateAfter > 0 && len(s.conns) > 0 && s.hdr.Status == record.StatusActive &&
		!s.busy && s.completed == s.nextID && len(s.held) == 0 && len(s.unstable) == 0 &&
		s.reply == nil && s.st.Pending == nil && len(s.st.Turns) == 0
}

// hibernateAt is when a hibernatable session may leave memory.
func (s *Machine) hibernateAt() time.Time { return s.quiet.Add(s.cfg.HibernateAfter) }

// offerHibernation emits Hibernate when the session has been quiet long
// enough.
func (s *Machine) offerHibernation(now time.Time) {
	if s.hibernatable() && !now.Before(s.hibernateAt()) {
		s.now(Hibernate{Conns: slices.Clone(s.conns), LastSeq: s.hdr.LastSeq})
	}
}

// rejoin attaches the connections a hibernation kept, silently: they were
// shown everything up to ev.LastSeq, and nothing can have been written to
// the session since but through this machine. Should the log say
// otherwise (the session ended or moved meanwhile), they are closed
// instead, and each client's resume (it knows its last seq) gets it
// exactly what it missed.
func (s *Machine) rejoin(ev Rejoin) {
	if s.hdr.Status != record.StatusActive || ev.LastSeq != s.hdr.LastSeq {
		for _, c := range ev.Conns {
			s.now(CloseConn{Conn: c, Why: CloseShutdown, Msg: "the session changed while it slept; reconnect"})
		}
		return
	}
	for _, c := range ev.Conns {
		if c != nil && !s.attached(c) {
			s.conns = append(s.conns, c)
		}
	}
}
