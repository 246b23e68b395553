package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-dev/tether/gateway/wire"
)

// FormatMessage renders an entry as Chat prints it.
func FormatMessage(m wire.Message) string {
	if m.Role != wire.RoleTool {
		role := m.Role
		if m.Metadata["cancelled"] == true && m.Role == wire.RoleAgent {
			role += " (cancelled)"
		}
		return fmt.Sprintf("[%d] %s: %s", m.Seq, role, m.Content)
	}
	name, _ := m.Metadata["name"].(string)
	status, _ := m.Metadata["status"].(string)
	s := fmt.Sprintf("[%d] tool: %s %s", m.Seq, name, status)
	switch status {
	case statusAwaiting:
		if args, ok := m.Metadata["args"].(map[string]any); ok && len(args) > 0 {
			b, _ := json.Marshal(args)
			s += " " + string(b)
		}
	case statusApproved, statusDenied:
		if by, _ := m.Metadata["by"].(string); by != "" {
			s += " by " + by
		}
	}
	if m.Content != "" && m.Content != status {
		s += ": " + m.Content
	}
	return s
}

// Tool statuses of PROTOCOL.md that Chat acts on.
const (
	statusAwaiting = "awaiting_approval"
	statusApproved = "approved"
	statusDenied   = "denied"
)

// approvalHint is what Chat shows for a call waiting for approval.
func approvalHint(name string) string {
	return fmt.Sprintf("tool %s is waiting for your approval: /approve or /deny", name)
}

// What the open (unterminated) output line is.
const (
	openNone = iota
	openPartial
	openStatus // a retry countdown, redrawn in place on a terminal
)

// printer serializes Chat's output. A streamed reply is printed as it
// grows, on one line left open; a countdown may be left open too and
// redrawn. Any other output first ends the open line.
type printer struct {
	mu       sync.Mutex
	w        io.Writer
	open     int
	partSeq  uint64 // the streamed reply last printed, and its text
	partText string
	printed  uint64        // newest seq printed
	replied  uint64        // newest user seq an agent or system entry answered
	users    uint64        // newest user entry printed
	notify   chan struct{} // closed and replaced on every entry
	// The newest tool call waiting for approval with no decision seen.
	waitID, waitName string
	// The last hello's session: its last seq and the call waiting then.
	helloLast uint64
	helloWait string
}

func newPrinter(w io.Writer) *printer { return &printer{w: w, notify: make(chan struct{})} }

// closeOpen ends the open line; p.mu is held.
func (p *printer) closeOpen() {
	if p.open != openNone {
		fmt.Fprintln(p.w)
		p.open = openNone
	}
}

func (p *printer) linef(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeOpen()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// status prints a status line; live leaves it open, to be redrawn.
func (p *printer) status(text string, live bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeOpen()
	if !live {
		fmt.Fprintln(p.w, text)
		return
	}
	fmt.Fprint(p.w, text)
	p.open = openStatus
}

// redraw replaces the open status line, if it is still the last output.
func (p *printer) redraw(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == openStatus {
		fmt.Fprint(p.w, "\r\033[K"+text)
	}
}

func (p *printer) message(m wire.Message) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeOpen()
	fmt.Fprintln(p.w, FormatMessage(m))
	p.printed = max(p.printed, m.Seq)
	switch m.Role {
	case wire.RoleAgent, wire.RoleSystem:
		if to, ok := m.Metadata["reply_to"].(float64); ok && to > 0 {
			p.replied = max(p.replied, uint64(to))
		}
	case wire.RoleUser:
		p.users = max(p.users, m.Seq)
	case wire.RoleTool:
		id, _ := m.Metadata["call_id"].(string)
		switch m.Metadata["status"] {
		case statusAwaiting:
			if m.Seq <= p.helloLast && id != p.helloWait {
				break // replayed, and decided since: the decision follows
			}
			p.waitID = id
			p.waitName, _ = m.Metadata["name"].(string)
			fmt.Fprintln(p.w, approvalHint(p.waitName))
		default: // decided (here or elsewhere), or running, or done
			if id != "" && id == p.waitID {
				p.waitID, p.waitName = "", ""
			}
		}
	}
	close(p.notify)
	p.notify = make(chan struct{})
}

// partial prints a streamed reply as it grows: the new text at the end of
// its open line, or the whole of it on a new line.
func (p *printer) partial(pt Partial) {
	p.mu.Lock()
	defer p.mu.Unlock()
	same := p.partSeq == pt.Seq
	if p.open == openPartial && same && !pt.Restart && strings.HasPrefix(pt.Text, p.partText) {
		fmt.Fprint(p.w, pt.Text[len(p.partText):])
	} else {
		p.closeOpen()
		label := "streaming"
		if same && (pt.Restart || !strings.HasPrefix(pt.Text, p.partText)) {
			label = "restarted"
		}
		fmt.Fprintf(p.w, "[%d] agent (%s): %s", pt.Seq, label, pt.Text)
		p.open = openPartial
	}
	p.partSeq, p.partText = pt.Seq, pt.Text
}

// caughtUp reports whether user entry sent has been answered and entries
// up to last printed, and gives a channel closed at the next entry.
func (p *printer) caughtUp(sent, last uint64) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.replied >= sent && p.printed >= last, p.notify
}

// restart is a new session shown from after seq last.
func (p *printer) restart(last uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printed, p.replied, p.users = last, 0, 0
	p.waitID, p.waitName, p.helloLast, p.helloWait = "", "", 0, ""
}

// pending takes a session frame's pending tool call, the session's state
// as of the hello, and says whether to show it: a call waiting for
// approval whose entry was printed already, or comes before what Chat
// shows (--last-seq), is shown once the session is attached if it is
// news; one whose entry is still to come is shown with it.
func (p *printer) pending(f wire.SessionFrame) (show bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pt := f.PendingToolCall
	p.helloLast, p.helloWait = f.LastSeq, ""
	if pt == nil || pt.Status != statusAwaiting {
		p.waitID, p.waitName = "", ""
		return false
	}
	p.helloWait = pt.CallID
	if pt.CallID == p.waitID {
		return false
	}
	p.waitID, p.waitName = pt.CallID, pt.Name
	return pt.StartedSeq <= p.printed
}

// waiting is the newest call waiting for approval, "" when none is.
func (p *printer) waiting() (id, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitID, p.waitName
}

// decided forgets the waiting call id: a decision for it was sent.
func (p *printer) decided(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waitID == id {
		p.waitID, p.waitName = "", ""
	}
}

// running reports whether a turn may be running: a user entry (the
// newest printed, or sent, the newest the chat sent) has no answer yet.
func (p *printer) running(sent uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.users, sent) > p.replied
}

func (p *printer) lastPrinted() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.printed
}

// What the client's hooks tell the chat's view.
type (
	sessionEv    struct{ f wire.SessionFrame }
	connectEv    struct{ url string }
	disconnectEv struct {
		err    error
		ending bool // the client ends: Chat says why
	}
	retryEv struct {
		url  string
		err  error
		wait time.Duration
	}
)

// view turns the client's events into status lines. It runs on the
// chat's pump goroutine only.
type view struct {
	chat     *chat
	p        *printer
	live     bool
	lastSeq  uint64 // the chat started after this seq
	session  wire.SessionFrame
	hint     string // a waiting call to show once connected
	sid      string // the session the chat shows
	online   bool
	ever     bool      // connected once
	lostAt   time.Time // when the connection was lost
	retryAt  time.Time // the next attempt, while a countdown is shown
	retryMsg string
	lastErr  string
	failures int
}

func (v *view) handle(ev any) {
	switch ev := ev.(type) {
	case sessionEv:
		v.session = ev.f
		v.chat.window.Store(int64(ev.f.WindowS * float64(time.Second)))
		v.hint = ""
		if v.p.pending(ev.f) {
			v.hint = ev.f.PendingToolCall.Name
		}
	case connectEv:
		v.connected(ev.url)
	case disconnectEv:
		v.online = false
		v.chat.online.Store(false)
		if ev.ending {
			return // Chat reports why the client ended
		}
		v.lostAt, v.failures, v.lastErr = time.Now(), 0, ""
		v.p.linef("connection lost (%s); reconnecting…", reason(ev.err))
	case retryEv:
		v.retry(ev)
	}
}

func (v *view) connected(url string) {
	v.attached(url)
	if v.hint != "" {
		v.p.linef("%s", approvalHint(v.hint))
		v.hint = ""
	}
}

func (v *view) attached(url string) {
	f := v.session
	wasEver := v.ever
	v.online, v.ever, v.retryAt, v.failures, v.lastErr = true, true, time.Time{}, 0, ""
	v.chat.online.Store(true)
	v.chat.told.Store(false)
	v.chat.last.Store(f.LastSeq)
	if wasEver && f.SessionID == v.sid {
		missed := "nothing missed"
		if n := f.LastSeq - min(f.LastSeq, v.p.lastPrinted()); n > 0 {
			missed = fmt.Sprintf("%d missed", n)
		}
		v.p.linef("reconnected to %s after %s: session %s resumed, %s", url, ago(v.lostAt), f.SessionID, missed)
		return
	}
	v.sid = f.SessionID
	what := "started"
	if f.Resumed {
		switch n := f.LastSeq - min(f.LastSeq, v.lastSeq); {
		case v.lastSeq == 0:
			what = fmt.Sprintf("resumed, %d entries", n)
		default:
			what = fmt.Sprintf("resumed, %d new since seq %d", n, v.lastSeq)
		}
	}
	v.p.linef("connected to %s: session %s %s — type a message, /help for commands", url, f.SessionID, what)
}

// retry shows a failed attempt and the wait before the next. Without a
// terminal, quick retries are not each shown: the first after a loss, any
// with a new reason, and those a second or more apart are.
func (v *view) retry(ev retryEv) {
	v.failures++
	why := netReason(ev.err)
	v.retryAt = time.Now().Add(ev.wait)
	where := ""
	if u, err := url.Parse(ev.url); err == nil && u.Host != "" {
		where = " at " + u.Host
	}
	v.retryMsg = fmt.Sprintf("server unreachable%s (%s), retrying in", where, why)
	show := v.failures == 1 || why != v.lastErr || ev.wait >= time.Second
	v.lastErr = why
	if v.live {
		v.p.status(v.countdown(), true)
	} else if show {
		v.p.status(v.countdown(), false)
	}
}

// countdown is the retry line with the time left.
func (v *view) countdown() string {
	left := time.Until(v.retryAt)
	if left < time.Second {
		return fmt.Sprintf("%s %.1fs…", v.retryMsg, max(left.Seconds(), 0))
	}
	return fmt.Sprintf("%s %ds…", v.retryMsg, int(math.Ceil(left.Seconds())))
}

// tick redraws a live countdown.
func (v *view) tick() {
	if v.live && !v.retryAt.IsZero() && !v.online {
		v.p.redraw(v.countdown())
	}
}

// reason is an error as people read it.
func reason(err error) string {
	if err == nil {
		return "unknown"
	}
	return strings.ReplaceAll(err.Error(), "client: ", "")
}

// netReason is why a connection attempt failed, short for the usual
// network failures.
func netReason(err error) string {
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "network unreachable"
	case errors.As(err, &dns):
		return "unknown host " + dns.Name
	case errors.Is(err, errTimeout), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "no answer in time"
	}
	return reason(err)
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "a while"
	}
	return time.Since(t).Round(100 * time.Millisecond).String()
}
