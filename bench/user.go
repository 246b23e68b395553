package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/gateway/client"
	"github.com/tether-dev/tether/gateway/wire"
)

// user is one simulated user: it keeps a session going (a new one when
// the old one expired), sends at its rate, waits for each reply, and
// disrupts its own network at random moments.
type user struct {
	b     *Bench
	idx   int
	name  string
	agent bool // aims its disruptions at tool runs
	net   *netSim
	send  *rand.Rand // the sending goroutine's
	chaos *rand.Rand // the chaos goroutine's

	mu   sync.Mutex
	runs []*run // every session it had, the last one current
}

// run is one session as its client saw it.
type run struct {
	u         *user
	c         *client.Client
	readDone  chan struct{} // the Messages reader has returned
	chaosDone chan struct{} // the chaos goroutine has returned
	toolStart chan struct{} // a tool started (capacity 1)
	endOnce   sync.Once

	mu        sync.Mutex
	sid       string
	attached  bool // attached once
	connected bool
	epoch     int       // disconnects so far
	lostAt    time.Time // when the current disconnection began
	induced   string    // drop or silence: the harness caused the next disconnect
	byServer  bool      // the current disconnection was not induced
	lastSeq   uint64    // newest seq delivered
	replyAt   map[uint64]time.Time
	change    chan struct{} // closed and replaced when replyAt or connected change
	expired   bool
	final     bool // the verifier has its EvFinal
}

func (r *run) notifyLocked() {
	close(r.change)
	r.change = make(chan struct{})
}

// loop runs the user until phase ends; the current session is then
// left open for the drain and the read-back.
func (u *user) loop(phase, drain context.Context) {
	for phase.Err() == nil {
		r, err := u.dial(phase)
		if err != nil {
			return
		}
		go r.chaosLoop(phase)
		r.sendLoop(phase, drain)
		<-r.chaosDone
		if phase.Err() != nil {
			select {
			case <-r.c.Done(): // ended just as the phase did
			default:
				return
			}
		}
		r.ended()
		_ = r.c.Close()
	}
}

// ended judges a client that ended by itself: an expiry or a refused
// resume (judged by the verifier at the resume) is final; any other
// failure is noted and the session is read back after the run.
func (r *run) ended() { r.endOnce.Do(r.judge) }

func (r *run) judge() {
	<-r.readDone
	b, err := r.u.b, r.c.Err()
	if errors.Is(err, client.ErrSessionLost) {
		r.mu.Lock()
		r.final = true
		expired := r.expired
		r.mu.Unlock()
		b.ver.Feed(r.sid, Event{Kind: EvFinal})
		if !expired {
			b.rec.Error("session_lost", time.Now())
		}
		return
	}
	b.ver.Feed(r.sid, Event{Kind: EvClientEnded, Err: err})
	b.rec.Error("client_ended", time.Now())
}

// current is the user's newest session.
func (u *user) current() *run {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.runs) == 0 {
		return nil
	}
	return u.runs[len(u.runs)-1]
}

// dial starts a new session, retrying until ctx ends.
func (u *user) dial(ctx context.Context) (*run, error) {
	b := u.b
	r := &run{u: u, readDone: make(chan struct{}), chaosDone: make(chan struct{}),
		toolStart: make(chan struct{}, 1), replyAt: make(map[uint64]time.Time), change: make(chan struct{})}
	urls := append([]string(nil), b.urls...)
	u.send.Shuffle(len(urls), func(i, j int) { urls[i], urls[j] = urls[j], urls[i] })
	c, err := client.Dial(ctx, client.Config{
		URLs:         urls,
		TokenFunc:    func(ctx context.Context) (string, error) { return b.tok.get(ctx, u.name) },
		MaxBackoff:   b.cfg.MaxBackoff,
		WriteTimeout: 5 * time.Second,
		Dialer:       &websocket.Dialer{NetDialContext: u.net.dial, HandshakeTimeout: 10 * time.Second},
		TLS:          b.cfg.TLS,
		OnSession:    r.onSession,
		OnConnect:    r.onConnect,
		OnDisconnect: r.onDisconnect,
		Logger:       b.cfg.Logger.With("user", u.name),
		// As tether.js and tether chat do: a hello of this user's that
		// a slow node acts on late (its client gave up on it, say across a
		// partition) joins the session instead of taking it from the
		// user's newer connection.
		Shared: true,
	})
	if err != nil {
		if ctx.Err() == nil {
			b.rec.Error("dial_new_session", time.Now())
			b.firstDialErr.CompareAndSwap(nil, &err)
		}
		return nil, err
	}
	r.c = c
	b.rec.Count(CNewSessions, time.Now(), 1)
	u.mu.Lock()
	u.runs = append(u.runs, r)
	u.mu.Unlock()
	go r.read()
	return r, nil
}

// onSession sees every session frame (on the client's manager goroutine).
func (r *run) onSession(f wire.SessionFrame) {
	b := r.u.b
	now := time.Now()
	b.noteWindow(f.WindowS)
	r.mu.Lock()
	if r.sid == "" {
		r.sid = f.SessionID
		r.mu.Unlock()
		return
	}
	sid, away, last := r.sid, now.Sub(r.lostAt), r.lastSeq
	if !f.Resumed && f.Reason == wire.ReasonExpired {
		r.expired = true
	}
	r.mu.Unlock()
	b.ver.Feed(sid, Event{Kind: EvResume, Frame: f, Away: away})
	switch {
	case f.Resumed:
		if f.LastSeq >= last {
			b.rec.Value(HReplayedPerResum, int64(f.LastSeq-last))
		}
	case f.Reason == wire.ReasonExpired:
		b.rec.Count(CExpired, now, 1)
	}
}

// onConnect: a socket's session is attached.
func (r *run) onConnect(string) {
	b := r.u.b
	now := time.Now()
	var helloAt time.Time
	if sc := r.u.net.lastConn(); sc != nil {
		if ns := sc.helloAt.Load(); ns != 0 {
			helloAt = time.Unix(0, ns)
		}
	}
	r.mu.Lock()
	resume := r.attached
	r.attached, r.connected, r.induced = true, true, ""
	lostAt, byServer := r.lostAt, r.byServer
	r.notifyLocked()
	r.mu.Unlock()
	if !resume {
		return
	}
	b.rec.Count(CResumes, now, 1)
	if !helloAt.IsZero() && helloAt.Before(now) {
		b.rec.Latency(HResume, now, now.Sub(helloAt))
	}
	if byServer {
		b.resumedAfter(lostAt, now)
	}
}

// onDisconnect: an attached socket was lost.
func (r *run) onDisconnect(_ string, err error) {
	now := time.Now()
	r.mu.Lock()
	r.connected = false
	r.epoch++
	kind := r.induced
	r.induced = ""
	r.byServer = kind == ""
	if kind == "" {
		r.lostAt = now
	}
	r.notifyLocked()
	r.mu.Unlock()
	if kind != "" {
		r.u.b.rec.Close("induced_"+kind, now)
		return
	}
	r.u.b.rec.Close(closeKind(err), now)
}

// closeKind names why a connection was lost: its close code, or what
// ended it.
func closeKind(err error) string {
	var ce *websocket.CloseError
	var ne net.Error
	switch {
	case errors.As(err, &ce):
		return strconv.Itoa(ce.Code)
	case err != nil && strings.Contains(err.Error(), "gap in the message stream"):
		return "client_gap"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	}
	return "network"
}

// read feeds every entry the client delivers to the verifier and notes
// replies and tool starts.
func (r *run) read() {
	defer close(r.readDone)
	b := r.u.b
	for m := range r.c.Messages() {
		now := time.Now()
		r.mu.Lock()
		sid := r.sid
		r.lastSeq = m.Seq
		isReply := (m.Role == wire.RoleAgent || m.Role == wire.RoleSystem) && metaSeq(m.Metadata["reply_to"]) != 0
		if isReply {
			r.replyAt[metaSeq(m.Metadata["reply_to"])] = now
			r.notifyLocked()
		}
		r.mu.Unlock()
		b.ver.Feed(sid, Event{Kind: EvEntry, Msg: m})
		if isReply {
			b.rec.Count(CReplies, now, 1)
			if m.Role == wire.RoleAgent && now.Before(b.start.Add(b.cfg.Duration)) {
				b.rec.Count(CTurns, now, 1)
			}
		}
		if m.Role == wire.RoleTool && m.Metadata["status"] == "started" {
			select {
			case r.toolStart <- struct{}{}:
			default:
			}
		}
	}
}

// state returns the connection epoch and whether a socket is attached.
func (r *run) state() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.epoch, r.connected
}

// sendLoop sends at the user's rate, each message after the previous
// one's reply, until phase ends (in-flight work may go on until drain
// ends) or the client ends.
func (r *run) sendLoop(phase, drain context.Context) {
	u, b := r.u, r.u.b
	next := time.Now()
	for n := 1; ; n++ {
		t := time.NewTimer(time.Until(next))
		select {
		case <-t.C:
		case <-phase.Done():
			t.Stop()
			return
		case <-r.c.Done():
			t.Stop()
			return
		}
		id := "m" + strconv.Itoa(n)
		t0 := time.Now()
		ep0, conn0 := r.state()
		b.rec.Count(CSends, t0, 1)
		seq, err := r.c.SendID(drain, id, fmt.Sprintf("message %d from %s", n, u.name), nil)
		if err != nil {
			var se *client.ServerError
			switch {
			case drain.Err() != nil, errors.Is(err, client.ErrClosed):
				return
			case errors.As(err, &se):
				b.rec.Error("send_"+se.Code, time.Now())
				continue
			}
			select {
			case <-r.c.Done():
				return // the client ended: the caller learns why
			default:
			}
			b.rec.Error("send_failed", time.Now())
			continue
		}
		now := time.Now()
		b.rec.Count(CAcks, now, 1)
		b.ver.Feed(r.sid, Event{Kind: EvAck, SendID: id, Seq: seq})
		ep1, _ := r.state()
		clean := conn0 && ep1 == ep0
		if clean {
			b.rec.Latency(HAck, now, now.Sub(t0))
		} else {
			b.rec.Latency(HAckReconnect, now, now.Sub(t0))
		}
		if at, ok := r.waitReply(drain, seq); ok {
			ep2, _ := r.state()
			if clean && ep2 == ep0 {
				b.rec.Latency(HReply, at, at.Sub(t0))
			} else {
				b.rec.Latency(HReplyReconnect, at, at.Sub(t0))
			}
		}
		next = t0.Add(time.Duration((0.5 + u.send.Float64()) / b.cfg.Rate * float64(time.Second)))
	}
}

// waitReply waits for the reply to user entry seq, up to ReplyTimeout.
func (r *run) waitReply(ctx context.Context, seq uint64) (time.Time, bool) {
	b := r.u.b
	timeout := time.NewTimer(b.cfg.ReplyTimeout)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		at, ok := r.replyAt[seq]
		if ok {
			delete(r.replyAt, seq)
		}
		ch := r.change
		r.mu.Unlock()
		if ok {
			return at, true
		}
		select {
		case <-ch:
		case <-timeout.C:
			b.rec.Count(CReplyTimeout, time.Now(), 1)
			return time.Time{}, false
		case <-ctx.Done():
			return time.Time{}, false
		case <-r.c.Done():
			return time.Time{}, false
		}
	}
}

// waitAttached waits until the session is attached again or the client
// has ended.
func (r *run) waitAttached(ctx context.Context) bool {
	for {
		r.mu.Lock()
		ok, ch := r.connected, r.change
		r.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-r.c.Done():
			return false
		case <-ctx.Done():
			return false
		}
	}
}
