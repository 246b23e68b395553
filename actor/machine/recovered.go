package machine

import (
	"time"

	"github.com/tether-dev/tether/wal/record"
)

// recover brings a session left by a previous run up to date at boot.
// lastAlive is the last moment that run was known to be alive.
//
//   - active: the client was connected when the node stopped (or when
//     the session's actor failed); the server learns of that disconnect
//     now, so the window starts now — unless a client is attached again
//     by the time a running session steps this.
//   - interrupted: a window that had ended before lastAlive has ended; any
//     other is extended by the downtime, so a restart never expires a
//     session that was alive when the server stopped.
func (s *Machine) recover(boot, lastAlive time.Time) {
	h := &s.hdr
	switch {
	case h.Status == record.StatusActive && len(s.conns) > 0:
		return
	case h.Status == record.StatusActive:
		s.markInterrupted(boot)
	case h.Status == record.StatusInterrupted && !lastAlive.Before(h.ExpiresAt):
		s.expire(boot)
		return
	case h.Status == record.StatusInterrupted:
		if down := boot.Sub(lastAlive); down > 0 {
			h.ExpiresAt = h.ExpiresAt.Add(down)
		}
	default:
		return
	}
	s.appendBatch(nil, nil, false)
}

// hasWork reports whether the session owes the agent a turn or a tool run.
func (s *Machine) HasWork() bool {
	return !s.hdr.Status.Terminal() && (s.st.Pending != nil || len(s.st.Turns) > 0)
}
