package client

import (
	"strings"

	"github.com/tether-dev/tether/gateway/wire"
)

// Partial is the agent reply being streamed as entry Seq, as far as it
// has come: parts 0..Part joined. It is not durable; entry Seq, when it
// comes on Messages, supersedes it.
type Partial struct {
	Seq  uint64
	Part int
	Text string
	// Restart: Text does not extend the last Partial for Seq delivered (the
	// server ran the turn again after a crash and sent its parts anew):
	// replace what was shown for Seq with Text.
	Restart bool
}

// reply is the streamed reply the client holds: parts 0..part, joined.
type reply struct {
	seq  uint64
	part int
	text strings.Builder
	// dirty: there is news the reader of Partials has not taken.
	dirty bool
	// shown is the text last handed to the reader of Partials.
	shown string
}

func newReply(seq uint64, part int, text string) *reply {
	r := &reply{seq: seq, part: part, dirty: true}
	r.text.WriteString(text)
	return r
}

// onDelta applies PROTOCOL.md's rules for delta frames: from 0 starts (or
// replaces) the reply; the next parts extend it; parts the client holds
// already are dropped; a delta for an entry the client knows exists, or
// one that would leave a hole, is ignored (the entry's message, which
// supersedes the parts, is on its way or already here).
func (m *manager) onDelta(s *sock, d *wire.Delta) {
	from := d.First()
	switch {
	case s.phase != phaseReady:
		m.c.log.Warn("tether: delta before the session was attached", "seq", d.Seq)
		return
	case d.Seq <= m.high || d.Seq <= m.last:
		return // its entry is in: the parts are superseded
	case from < 0 || d.Part < from || d.Text == "":
		m.c.log.Warn("tether: malformed delta ignored", "seq", d.Seq, "from", from, "part", d.Part)
		return
	}
	r := m.reply
	switch {
	case from == 0:
		// A first delta, a catch-up, or a turn run again after a crash: it
		// replaces whatever was held for this seq.
		m.reply = newReply(d.Seq, d.Part, d.Text)
		if r != nil && r.seq == d.Seq {
			m.reply.shown = r.shown
		}
	case r == nil || r.seq != d.Seq:
		m.c.log.Warn("tether: delta for a reply whose first parts are missing ignored", "seq", d.Seq, "from", from)
	case from == r.part+1:
		r.text.WriteString(d.Text)
		r.part, r.dirty = d.Part, true
	case d.Part <= r.part:
		// Parts held already.
	default:
		m.c.log.Warn("tether: delta does not follow the parts held; ignored", "seq", d.Seq, "from", from, "held", r.part)
	}
}

// superseded forgets the streamed reply once entry seq, or the server's
// word that it exists, is in.
func (m *manager) superseded(seq uint64) {
	if m.reply != nil && m.reply.seq <= seq {
		m.reply = nil
	}
}

// streamMark is the hello's stream field: the parts held of a reply still
// in progress, so the server goes on from the next one.
func (m *manager) streamMark() *wire.StreamMark {
	if m.reply == nil || m.sid == "" {
		return nil
	}
	return &wire.StreamMark{Seq: m.reply.seq, Part: m.reply.part}
}

// offerable is the Partial to offer the reader now, if any: only when
// every entry before it was taken from Messages.
func (m *manager) offerable() (Partial, bool) {
	r := m.reply
	if r == nil || !r.dirty || len(m.queue) > 0 || m.last+1 != r.seq {
		return Partial{}, false
	}
	text := r.text.String()
	return Partial{Seq: r.seq, Part: r.part, Text: text, Restart: !strings.HasPrefix(text, r.shown)}, true
}

func (m *manager) offered(p Partial) {
	if r := m.reply; r != nil && r.seq == p.Seq {
		r.dirty, r.shown = false, p.Text
	}
}
