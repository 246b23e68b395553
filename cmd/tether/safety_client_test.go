package main

// The safety tests' client: one session, written to from a goroutine of
// its own while the cluster is being broken, so it never calls t.Fatal.
// A refused write (error unavailable, close 1013) or a node that does not
// answer is allowed: the client reconnects, to the next node of its list,
// resumes from the newest seq it was shown and sends again with the same
// id. What it is acked must survive; bench.Verifier (the continuity
// checker `tether bench` uses) holds what the client was shown and acked
// against the whole log read back through every node.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/bench"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/gateway/wstest"
)

var (
	// errRefused: the cluster said "not now" (unavailable, rate_limited,
	// 1013, 1012); retrying is what a client does.
	errRefused = errors.New("refused")
	errTimeout = errors.New("no answer")
)

const (
	sendTimeout = 5 * time.Second
	backoff     = 100 * time.Millisecond
)

// sclient is one session's client. Its fields belong to whichever
// goroutine is driving it (the test's, or one writer at a time).
type sclient struct {
	t    *testing.T
	c    *pcluster
	name string
	tok  string
	sid  string
	vias []int // the nodes it writes through, in the order it tries them
	via  int   // index into vias
	conn *wstest.Conn
	last uint64 // the newest seq it was shown

	next     int // the number of the next send id
	events   []bench.Event
	ackAt    []time.Time
	refusals int
	refused  []string // resumes answered resumed:false (the session gone)
	notes    []string // unexpected frames, logged by the test goroutine
	repeats  []int    // how many times each note came in a row
}

// note keeps an unexpected frame for the test's log (one line for a run
// of the same one).
func (s *sclient) note(msg string) {
	if n := len(s.notes); n > 0 && s.notes[n-1] == msg {
		s.repeats[n-1]++
		return
	}
	s.notes, s.repeats = append(s.notes, msg), append(s.repeats, 1)
}

// newClient creates a session through node home, failing the test if
// the cluster does not take it within 20 s.
func (c *pcluster) newClient(name string, home int) *sclient {
	c.t.Helper()
	s := &sclient{t: c.t, c: c, name: name, tok: token(c.t, name)}
	s.setVias(home)
	if err := s.retry(time.Now().Add(20*time.Second), nil, s.attach); err != nil {
		c.t.Fatalf("%s: new session through %s: %v", name, c.ids[home], err)
	}
	c.sids = append(c.sids, s.sid)
	return s
}

// setVias makes the client write through nodes, in this order, from the
// first; with one node given, through that node first and then the
// others.
func (s *sclient) setVias(nodes ...int) {
	if len(nodes) == 1 {
		n := len(s.c.procs)
		for k := 1; k < n; k++ {
			nodes = append(nodes, (nodes[0]+k)%n)
		}
	}
	s.drop()
	s.vias, s.via = nodes, 0
}

// only makes the client write through node k and no other (a client on
// k's side of a partition).
func (s *sclient) only(k int) {
	s.setVias(k)
	s.vias = s.vias[:1]
}

// node is the node the client writes through now.
func (s *sclient) node() int { return s.vias[s.via] }

func (s *sclient) drop() {
	if s.conn != nil {
		s.conn.Drop()
		s.conn = nil
	}
}

// attach connects to the current node: a new session, or a resume from
// the newest seq the client was shown.
func (s *sclient) attach() error {
	s.drop()
	p := s.c.procs[s.node()]
	conn, err := wstest.DialVia(s.t, p.wsURL(), p.opts.netDial)
	if err != nil {
		return fmt.Errorf("%w: dial %s: %w", errRefused, s.c.ids[s.node()], err)
	}
	h := map[string]any{"type": "hello", "token": s.tok}
	if s.sid != "" {
		h["session_id"], h["last_seq"] = s.sid, s.last
	}
	f, err := s.write(conn, h)
	if err != nil {
		conn.Drop()
		return err
	}
	if f.Type == "error" {
		conn.Drop()
		return s.refusal(f)
	}
	if f.Type != "session" {
		conn.Drop()
		return fmt.Errorf("hello via %s answered with %s", s.c.ids[s.node()], f.Raw)
	}
	if s.sid == "" {
		s.sid = f.SessionID
	} else {
		if !f.Resumed {
			// Not fed to the Verifier: it would then judge the session
			// by what its client saw and no longer by the log read back.
			conn.Drop()
			s.refused = append(s.refused, fmt.Sprintf("resume with last_seq %d via %s at %s: %s",
				s.last, s.c.ids[s.node()], time.Now().Format("15:04:05.000"), f.Raw))
			return fmt.Errorf("resume via %s: %s", s.c.ids[s.node()], f.Raw)
		}
		var sf wire.SessionFrame
		_ = json.Unmarshal([]byte(f.Raw), &sf)
		s.events = append(s.events, bench.Event{Kind: bench.EvResume, Frame: sf})
	}
	s.conn = conn
	return nil
}

// write sends v and returns the first frame that is not an entry or an
// ack of another send (those are recorded).
func (s *sclient) write(conn *wstest.Conn, v any) (frame, error) {
	if err := conn.Write(v); err != nil {
		return frame{}, fmt.Errorf("%w: write: %w", errRefused, err)
	}
	return s.read(conn, "", time.Now().Add(sendTimeout))
}

// read records frames until one that is not an entry (or until the ack
// of send id, when id is set).
func (s *sclient) read(conn *wstest.Conn, id string, deadline time.Time) (frame, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case f, ok := <-conn.Frames():
			if !ok {
				var ce *websocket.CloseError
				if errors.As(conn.Err(), &ce) && (ce.Code == 1013 || ce.Code == 1012) {
					return frame{}, fmt.Errorf("%w: closed %d", errRefused, ce.Code)
				}
				return frame{}, fmt.Errorf("%w: connection ended: %v", errRefused, conn.Err())
			}
			switch f.Type {
			case "message":
				s.entry(f)
			case "history_batch":
				for _, m := range f.Messages {
					s.entry(m)
				}
			case "ack":
				s.events = append(s.events, bench.Event{Kind: bench.EvAck, SendID: f.ID, Seq: f.Seq})
				s.ackAt = append(s.ackAt, time.Now())
				if id != "" && f.ID == id {
					return f, nil
				}
			case "delta", "typing", "pong":
			default:
				return f, nil
			}
		case <-timer.C:
			return frame{}, fmt.Errorf("%w via %s within %v", errTimeout, s.c.ids[s.node()], sendTimeout)
		}
	}
}

func (s *sclient) entry(f frame) {
	var m wire.Message
	if err := json.Unmarshal([]byte(f.Raw), &m); err != nil {
		s.note(fmt.Sprintf("undecodable entry %s: %v", f.Raw, err))
		return
	}
	s.events = append(s.events, bench.Event{Kind: bench.EvEntry, Msg: m})
	s.last = max(s.last, m.Seq)
}

// refusal is the error for an error frame: errRefused for the codes that
// mean "not now", anything else is noted too.
func (s *sclient) refusal(f frame) error {
	if f.Code == "unavailable" || f.Code == "rate_limited" {
		return fmt.Errorf("%w: %s", errRefused, f.Code)
	}
	s.note("via " + s.c.ids[s.node()] + ": " + f.Raw)
	return fmt.Errorf("error frame via %s: %s", s.c.ids[s.node()], f.Raw)
}

// send sends id once on the current connection (attaching first if
// needed) and waits for its ack.
func (s *sclient) send(id string) error {
	if s.conn == nil {
		if err := s.attach(); err != nil {
			return err
		}
	}
	if err := s.conn.Write(sendFrame(id, s.name+" "+id)); err != nil { // the same content each try
		return fmt.Errorf("%w: write: %w", errRefused, err)
	}
	deadline := time.Now().Add(sendTimeout)
	for {
		f, err := s.read(s.conn, id, deadline)
		switch {
		case err != nil:
			return err
		case f.Type == "ack":
			return nil
		case f.Type == "error":
			return s.refusal(f)
		}
		s.note("unexpected frame while sending: " + f.Raw)
	}
}

// retry runs op until it succeeds, stop is closed (nil) or limit passes
// (its last error); after each failure the client drops its connection,
// waits a client's backoff and moves on to its next node.
func (s *sclient) retry(limit time.Time, stop <-chan struct{}, op func() error) error {
	for {
		err := op()
		if err == nil {
			return nil
		}
		s.refusals++
		s.drop()
		s.via = (s.via + 1) % len(s.vias)
		if time.Now().After(limit) {
			return fmt.Errorf("%s: gave up at %v: %w", s.name, time.Now().Format("15:04:05.000"), err)
		}
		select {
		case <-stop:
			return nil
		case <-time.After(backoff):
		}
	}
}

// sendNext sends the next id until it is acked (stop: abandoned, and
// the id is not used again).
func (s *sclient) sendNext(limit time.Time, stop <-chan struct{}) error {
	id := fmt.Sprintf("m%d", s.next)
	s.next++
	return s.retry(limit, stop, func() error {
		select {
		case <-stop:
			return nil
		default:
		}
		return s.send(id)
	})
}

// sendEach has every client make n acked sends, all at once; a send not
// acked within limit (refusals retried) fails the test, and the others
// go on. It returns when every client is done.
func sendEach(t *testing.T, clients []*sclient, n int, limit time.Duration) {
	t.Helper()
	errs := make(chan error, len(clients))
	for _, s := range clients {
		go func() {
			var err error
			for range n {
				if err = s.sendNext(time.Now().Add(limit), nil); err != nil {
					err = fmt.Errorf("%s (%s): send m%d: %w", s.name, s.sid, s.next-1, err)
					break
				}
			}
			errs <- err
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// writeAll has every client send, one message per pace each, until d
// passes; refusals are retried and allowed. It returns when every writer
// stopped.
func writeAll(clients []*sclient, d, pace time.Duration) {
	stop := make(chan struct{})
	done := make(chan struct{}, len(clients))
	for _, s := range clients {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				_ = s.sendNext(time.Now().Add(time.Hour), stop) // only stop ends it
				select {
				case <-stop:
					return
				case <-time.After(pace):
				}
			}
		}()
	}
	time.Sleep(d) // the length of the fault is the point here, not a wait for a condition
	close(stop)
	for range clients {
		<-done
	}
}

// resumeEverywhere has the client resume with its newest last_seq
// through every node in nodes; each must take it within limit.
func (s *sclient) resumeEverywhere(nodes []int, limit time.Duration) {
	s.t.Helper()
	for _, k := range nodes {
		s.only(k)
		if err := s.retry(time.Now().Add(limit), nil, s.attach); err != nil {
			s.t.Errorf("%s (%s): resume with last_seq %d via %s: %v", s.name, s.sid, s.last, s.c.ids[k], err)
		}
		s.drop()
	}
}

// acked is how many sends the client was acked.
func (s *sclient) acked() int { return len(s.ackAt) }

// maxAckGap is the longest time between from (or an ack) and the next
// ack, up to to; it tells how long the client could not write.
func (s *sclient) maxAckGap(from, to time.Time) time.Duration {
	prev, gap := from, time.Duration(0)
	for _, at := range append(slices.Clone(s.ackAt), to) {
		if at.Before(from) {
			continue
		}
		if at.After(to) {
			at = to
		}
		gap = max(gap, at.Sub(prev))
		prev = at
	}
	return gap
}
