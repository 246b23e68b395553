package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/gateway/wire"
)

// ChatHelp lists the commands Chat understands.
const ChatHelp = `commands: /stop  /approve  /deny  /context key=value ...  /history [N]  /drop  /complete  /quit  /help`

// ChatConfig configures Chat.
type ChatConfig struct {
	// Client is the connection. Its hooks (OnSession, OnConnect, ...) are
	// kept and called after Chat's own.
	Client Config
	// In is what the user types, a line at a time. Chat closes it on
	// return when it is an io.Closer, to end the goroutine reading it.
	In io.Reader
	// Out gets everything Chat prints.
	Out io.Writer
	// ResumeCommand, when set, is the command that resumes a session: Chat
	// prints it when the user leaves (/quit, end of input, ctx ended).
	ResumeCommand func(sessionID string) string
	// Live says Out is a terminal: the retry countdown is redrawn in place
	// every second instead of printed once per attempt.
	Live bool
}

// Chat is the terminal chat of `tether chat`. It connects in the
// background and says so only once the session is attached; until then,
// and whenever the connection is lost, it shows why and when it retries,
// and it never gives up (ctx ends it). It reads lines from In all the
// time, also while a turn runs: a plain line is sent (typed while
// offline, it is queued and sent once reconnected, once), a line starting
// with / is a command (ChatHelp); /drop and /quit act at once, the other
// commands in order with the sends. Every entry of the session is printed
// as "[seq] role: content" (tool entries as "[seq] tool: name status:
// result"), a streamed reply as it grows. A tool call waiting for the
// user's approval is shown with how to decide it; /approve and /deny
// decide the newest one still waiting, /stop cancels the turn running
// (its text so far stays, marked cancelled). Chat attaches shared
// (Config.Shared): a second terminal, or a browser tab, on the same
// session stays live, and each shows what the other sent and decided.
// A send the server refuses
// (too_large, bad_request, over the frame limit) is reported and the
// chat goes on.
//
// If the session cannot be resumed (expired, not found, completed), Chat
// says so and goes on in the new session the server started.
//
// Chat returns nil at /quit, after /complete, or at the end of In (once
// what was sent is answered); ctx.Err() when ctx ends. Leaving, it prints
// how to resume (ResumeCommand). It returns an error when the session
// ends otherwise: the token was refused (ErrUnauthorized), another
// connection took the session over (ErrSuperseded), a fresh login is
// needed (ErrReauthRequired).
func Chat(ctx context.Context, cfg ChatConfig) error {
	ch := &chat{cfg: cfg, p: newPrinter(cfg.Out), jobs: make(chan job, 256), workerDone: make(chan struct{})}
	ch.view = &view{p: ch.p, live: cfg.Live, chat: ch}
	lines, stopLines := readLines(cfg.In)
	defer stopLines()
	wctx, cancel := context.WithCancel(ctx)
	go ch.work(wctx)
	defer func() {
		cancel()
		ch.closeJobs()
		<-ch.workerDone
	}()
	ccfg := cfg.Client
	ccfg.Shared = true
	for {
		next, err := ch.run(ctx, ccfg, lines)
		if next == nil {
			return err
		}
		ccfg.SessionID, ccfg.LastSeq = next.NewSessionID, 0
	}
}

type chat struct {
	cfg        ChatConfig
	p          *printer
	view       *view
	jobs       chan job
	jobsOnce   sync.Once
	workerDone chan struct{}
	pending    atomic.Int64 // lines queued or being sent
	sent       atomic.Uint64
	online     atomic.Bool
	told       atomic.Bool   // that typed lines are queued, while offline
	window     atomic.Int64  // the session's reconnect window, ns
	last       atomic.Uint64 // the session's last seq when it was attached

	mu sync.Mutex
	c  *Client
}

type job struct {
	cmd  string // "" sends text
	text string
	set  map[string]any
	n    int
}

// run is one client: it ends with the next session to go on in (the
// one asked for was lost), or with Chat's result.
func (ch *chat) run(ctx context.Context, ccfg Config, lines <-chan string) (*SessionLostError, error) {
	events := make(chan any, 64)
	ccfg = chatHooks(ccfg, events)
	c, err := New(ccfg)
	if err != nil {
		return nil, err
	}
	ch.mu.Lock()
	ch.c = c
	ch.mu.Unlock()
	ch.view.lastSeq = ccfg.LastSeq
	ch.p.restart(ccfg.LastSeq)
	ch.sent.Store(0)
	ch.last.Store(0)
	pumped := make(chan struct{})
	go ch.pump(c, events, pumped)
	defer func() {
		c.Close()
		<-pumped
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return ch.finish(ctx, c, pumped)
			}
			if ch.line(c, strings.TrimSpace(line)) {
				ch.leave(c)
				return nil, nil
			}
		case <-c.Done():
			return ch.ended(c, pumped)
		case <-ctx.Done():
			ch.leave(c)
			return nil, ctx.Err()
		}
	}
}

// chatHooks chains Chat's hooks before the caller's (OnDisconnect is
// left to the caller: Chat has its own, which also says whether the
// client ends).
func chatHooks(cfg Config, events chan<- any) Config {
	onSession, onConnect, onRetry := cfg.OnSession, cfg.OnConnect, cfg.OnRetry
	cfg.OnSession = func(f wire.SessionFrame) {
		events <- sessionEv{f}
		if onSession != nil {
			onSession(f)
		}
	}
	cfg.OnConnect = func(url string) {
		events <- connectEv{url}
		if onConnect != nil {
			onConnect(url)
		}
	}
	cfg.onLost = func(err error, ending bool) { events <- disconnectEv{err: err, ending: ending} }
	cfg.OnRetry = func(url string, err error, wait time.Duration) {
		events <- retryEv{url, err, wait}
		if onRetry != nil {
			onRetry(url, err, wait)
		}
	}
	return cfg
}

// pump prints what c delivers and what its hooks tell, until c's
// Messages closes. Status events are taken first: one told before an
// entry was queued is printed before it.
func (ch *chat) pump(c *Client, events <-chan any, pumped chan<- struct{}) {
	defer close(pumped)
	drain := func() {
		for {
			select {
			case ev := <-events:
				ch.view.handle(ev)
			default:
				return
			}
		}
	}
	var tick <-chan time.Time
	if ch.cfg.Live {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	msgs, parts := c.Messages(), c.Partials()
	for {
		drain()
		select {
		case ev := <-events:
			ch.view.handle(ev)
		case m, ok := <-msgs:
			if !ok {
				drain()
				return
			}
			ch.p.message(m)
		case pt, ok := <-parts:
			if !ok {
				parts = nil
				continue
			}
			ch.p.partial(pt)
		case <-tick:
			ch.view.tick()
		}
	}
}

// line handles one typed line at once; true leaves the chat.
func (ch *chat) line(c *Client, line string) (quit bool) {
	if line == "" {
		return false
	}
	if !strings.HasPrefix(line, "/") {
		if !ch.online.Load() && !ch.told.Swap(true) {
			ch.p.linef("(not connected: what you type is queued and sent once connected)")
		}
		ch.enqueue(job{text: line})
		return false
	}
	cmd, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "/quit":
		return true
	case "/drop":
		if !ch.online.Load() {
			ch.p.linef("not connected: nothing to drop")
			return false
		}
		ch.p.linef("dropping the connection")
		c.Drop()
	case "/context":
		set := map[string]any{}
		for _, kv := range strings.Fields(arg) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				set = nil
				break
			}
			set[k] = v
		}
		if len(set) == 0 {
			ch.p.linef("usage: /context key=value ...")
			return false
		}
		ch.enqueue(job{cmd: cmd, set: set})
	case "/history":
		n := 10
		if arg != "" {
			var err error
			if n, err = strconv.Atoi(arg); err != nil || n < 1 {
				ch.p.linef("usage: /history N (N ≥ 1)")
				return false
			}
		}
		ch.enqueue(job{cmd: cmd, n: n})
	case "/complete":
		ch.enqueue(job{cmd: cmd})
	case "/stop", "/approve", "/deny":
		if arg != "" {
			ch.p.linef("%s takes no argument; %s", cmd, ChatHelp)
			return false
		}
		ch.enqueue(job{cmd: cmd})
	case "/help":
		ch.p.linef("%s", ChatHelp)
	default:
		ch.p.linef("unknown command %s; %s", cmd, ChatHelp)
	}
	return false
}

// finish is the end of input: once connected, what was typed is sent
// and answered and the session's entries up to then are printed (so
// `tether chat --session ID </dev/null` prints a transcript), then the
// chat leaves.
func (ch *chat) finish(ctx context.Context, c *Client, pumped <-chan struct{}) (*SessionLostError, error) {
	ch.closeJobs()
	for _, ready := range []<-chan struct{}{c.Ready(), ch.workerDone} {
		select {
		case <-ready:
		case <-c.Done():
			return ch.ended(c, pumped)
		case <-ctx.Done():
			ch.leave(c)
			return nil, ctx.Err()
		}
	}
	for {
		ok, next := ch.p.caughtUp(ch.sent.Load(), ch.last.Load())
		if ok {
			break
		}
		select {
		case <-next:
		case <-c.Done():
			return ch.ended(c, pumped)
		case <-ctx.Done():
			ch.leave(c)
			return nil, ctx.Err()
		}
	}
	ch.leave(c)
	return nil, nil
}

// ended reports why c ended, once everything it held is printed.
func (ch *chat) ended(c *Client, pumped <-chan struct{}) (*SessionLostError, error) {
	<-pumped
	err := c.Err()
	sid := c.SessionID()
	var lost *SessionLostError
	var se *ServerError
	switch {
	case errors.As(err, &lost):
		ch.p.linef("session %s could not be resumed (%s); continuing in new session %s", lost.SessionID, lost.Reason, lost.NewSessionID)
		return lost, nil
	case errors.Is(err, ErrCompleted):
		ch.p.linef("session %s completed", sid)
		return nil, nil
	case errors.Is(err, ErrUnauthorized) && errors.As(err, &se):
		return nil, &chatError{"the server refused the token: " + se.Message, err}
	case errors.Is(err, ErrUnauthorized):
		return nil, &chatError{reason(err), err}
	case errors.Is(err, ErrReauthRequired):
		return nil, &chatError{fmt.Sprintf("session %s is sensitive and needs a fresh login: resume it with a new token", sid), err}
	case errors.Is(err, ErrSuperseded):
		return nil, &chatError{fmt.Sprintf("another connection resumed session %s", sid), err}
	}
	return nil, &chatError{fmt.Sprintf("session %s ended: %s", sid, reason(err)), err}
}

// chatError is a reason Chat ended, said for people; it matches the
// client's error (ErrUnauthorized, ...) with errors.Is.
type chatError struct {
	msg   string
	cause error
}

func (e *chatError) Error() string { return e.msg }
func (e *chatError) Unwrap() error { return e.cause }

// leave says how to come back.
func (ch *chat) leave(c *Client) {
	if n := ch.pending.Load(); n > 0 {
		ch.p.linef("%d typed line(s) not confirmed by the server: they may not have been stored", n)
	}
	sid := c.SessionID()
	if sid == "" {
		ch.p.linef("left before a session was started")
		return
	}
	window := "a while"
	if w := time.Duration(ch.window.Load()); w > 0 {
		window = w.String()
	}
	ch.p.linef("left session %s; it stays resumable for %s", sid, window)
	if ch.cfg.ResumeCommand != nil {
		ch.p.linef("to resume: %s", ch.cfg.ResumeCommand(sid))
	}
}
