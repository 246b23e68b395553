package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/tether-dev/tether/gateway/wire"
)

// ChatHelp lists the commands Chat understands.
const ChatHelp = `commands: /context key=value ...  /history [N]  /drop  /complete  /quit  /help`

// Chat is the terminal chat of `tether chat`. It dials cfg, then reads
// lines from in: a plain line is sent, and Chat waits for the agent's
// answer to it before reading the next; a line starting with / is a
// command (ChatHelp). Every entry of the session is printed to out as
// "[seq] role: content" (tool entries as "[seq] tool: name status: result"),
// and a line is printed whenever the client resumes after a drop.
//
// If cfg.SessionID cannot be resumed (expired, not found, completed),
// Chat says so and goes on in the new session the server started.
//
// Chat returns nil at /quit (the session stays resumable), after
// /complete, or at the end of in; the client's error if the session ends
// otherwise (ErrSuperseded, ...); ctx.Err() when ctx ends, checked
// between lines and while waiting for the server (a read of in that
// blocks is not interrupted).
func Chat(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	p := &printer{w: out, notify: make(chan struct{})}
	hook := cfg.OnSession
	cfg.OnSession = func(f wire.SessionFrame) {
		p.session(f)
		if hook != nil {
			hook(f)
		}
	}
	c, err := Dial(ctx, cfg)
	if lost := (*SessionLostError)(nil); errors.As(err, &lost) {
		p.linef("session %s could not be resumed (%s); continuing in new session %s", lost.SessionID, lost.Reason, lost.NewSessionID)
		cfg.SessionID, cfg.LastSeq = lost.NewSessionID, 0
		c, err = Dial(ctx, cfg)
	}
	if err != nil {
		return err
	}
	printed := make(chan struct{})
	go func() {
		defer close(printed)
		for m := range c.Messages() {
			p.message(m)
		}
		if err := c.Err(); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrCompleted) {
			p.linef("session ended: %v", err)
		}
	}()
	defer func() {
		c.Close()
		<-printed
	}()
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return err
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if done, err := chatLine(ctx, c, p, printed, line); done || err != nil {
			return err
		}
	}
	return sc.Err()
}

// chatLine runs one line; done ends the chat.
func chatLine(ctx context.Context, c *Client, p *printer, printed <-chan struct{}, line string) (done bool, err error) {
	if !strings.HasPrefix(line, "/") {
		seq, err := c.Send(ctx, line, nil)
		if err != nil {
			return true, err
		}
		return false, p.waitReply(ctx, c, seq)
	}
	cmd, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "/quit":
		p.linef("left session %s; it stays resumable for a while", c.SessionID())
		return true, nil
	case "/complete":
		if err := c.Complete(ctx); err != nil {
			return true, err
		}
		select { // the server closes: everything it sent gets printed first
		case <-printed:
		case <-ctx.Done():
			return true, ctx.Err()
		}
		p.linef("session %s completed", c.SessionID())
		return true, nil
	case "/context":
		set := map[string]any{}
		for _, kv := range strings.Fields(arg) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				p.linef("usage: /context key=value ...")
				return false, nil
			}
			set[k] = v
		}
		if len(set) == 0 {
			p.linef("usage: /context key=value ...")
			return false, nil
		}
		merged, err := c.SetContext(ctx, set)
		if err != nil {
			return true, err
		}
		b, _ := json.Marshal(merged)
		p.linef("context: %s", b)
	case "/history":
		n := 10
		if arg != "" {
			if n, err = strconv.Atoi(arg); err != nil || n < 1 {
				p.linef("usage: /history N (N ≥ 1)")
				return false, nil
			}
		}
		h, err := c.History(ctx, 0, n)
		if err != nil {
			return true, err
		}
		p.linef("history: %d entries", len(h.Messages))
		for _, m := range h.Messages {
			p.linef("  %s", FormatMessage(m))
		}
	case "/drop":
		p.linef("dropping the connection")
		c.Drop()
	case "/help":
		p.linef("%s", ChatHelp)
	default:
		p.linef("unknown command %s; %s", cmd, ChatHelp)
	}
	return false, nil
}

// FormatMessage renders an entry as Chat prints it.
func FormatMessage(m wire.Message) string {
	if m.Role != "tool" {
		return fmt.Sprintf("[%d] %s: %s", m.Seq, m.Role, m.Content)
	}
	name, _ := m.Metadata["name"].(string)
	status, _ := m.Metadata["status"].(string)
	s := fmt.Sprintf("[%d] tool: %s %s", m.Seq, name, status)
	if m.Content != "" {
		s += ": " + m.Content
	}
	return s
}

// printer serializes Chat's output and tracks which user entries have
// been answered.
type printer struct {
	mu      sync.Mutex
	w       io.Writer
	sid     string
	replied uint64        // newest user seq an agent or system entry answered
	notify  chan struct{} // closed and replaced on every entry
}

func (p *printer) linef(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *printer) session(f wire.SessionFrame) {
	if !f.Resumed && f.Reason != "new" {
		return // a lost session: Chat reports it when Dial fails
	}
	p.mu.Lock()
	first := f.SessionID != p.sid
	p.sid = f.SessionID
	p.mu.Unlock()
	switch {
	case !first:
		p.linef("reconnected: session %s resumed (server at seq %d)", f.SessionID, f.LastSeq)
	case f.Resumed:
		p.linef("session %s resumed (server at seq %d)", f.SessionID, f.LastSeq)
	default:
		p.linef("session %s started", f.SessionID)
	}
}

func (p *printer) message(m wire.Message) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w, FormatMessage(m))
	if m.Role == "agent" || m.Role == "system" {
		if to, ok := m.Metadata["reply_to"].(float64); ok && to > 0 {
			p.replied = max(p.replied, uint64(to))
		}
	}
	close(p.notify)
	p.notify = make(chan struct{})
}

// waitReply waits until user entry seq has been answered and printed.
func (p *printer) waitReply(ctx context.Context, c *Client, seq uint64) error {
	for {
		p.mu.Lock()
		ok, ch := p.replied >= seq, p.notify
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-c.Done():
			return nil // the next call reports why
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
