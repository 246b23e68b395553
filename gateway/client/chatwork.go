package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
)

// The chat's work besides printing: typed lines are read on one
// goroutine, and what needs the server (sends, /context, /history,
// /complete, /stop, /approve, /deny) runs on another, in the order it
// was typed, so that the line after a message is read while the message
// waits for its ack.

func (ch *chat) enqueue(j job) {
	ch.pending.Add(1)
	ch.jobs <- j
}

func (ch *chat) closeJobs() { ch.jobsOnce.Do(func() { close(ch.jobs) }) }

// work runs the queued jobs in order, on the current client.
func (ch *chat) work(ctx context.Context) {
	defer close(ch.workerDone)
	for j := range ch.jobs {
		if ctx.Err() != nil {
			return
		}
		ch.mu.Lock()
		c := ch.c
		ch.mu.Unlock()
		ch.do(ctx, c, j)
		ch.pending.Add(-1)
	}
}

func (ch *chat) do(ctx context.Context, c *Client, j job) {
	switch j.cmd {
	case "":
		seq, err := c.Send(ctx, j.text, nil)
		if err != nil {
			ch.failed(ctx, "not sent", err)
			return
		}
		for old := ch.sent.Load(); seq > old && !ch.sent.CompareAndSwap(old, seq); old = ch.sent.Load() {
		}
	case "/context":
		merged, err := c.SetContext(ctx, j.set)
		if err != nil {
			ch.failed(ctx, "/context failed", err)
			return
		}
		b, _ := json.Marshal(merged)
		ch.p.linef("context: %s", b)
	case "/history":
		h, err := c.History(ctx, 0, j.n)
		if err != nil {
			ch.failed(ctx, "/history failed", err)
			return
		}
		ch.p.linef("history: %d entries", len(h.Messages))
		for _, m := range h.Messages {
			ch.p.linef("  %s", FormatMessage(m))
		}
	case "/complete":
		if err := c.Complete(ctx); err != nil {
			ch.failed(ctx, "/complete failed", err)
		}
	case "/stop":
		if !ch.p.running(ch.sent.Load()) {
			ch.p.linef("/stop: no turn is running")
			return
		}
		ch.p.linef("stopping the running turn")
		if err := c.Cancel(ctx, 0); err != nil {
			ch.failed(ctx, "/stop failed", err)
		}
	case "/approve", "/deny":
		id, name := ch.p.waiting()
		if id == "" {
			ch.p.linef("%s: no tool call is waiting for your approval", j.cmd)
			return
		}
		if err := c.Approve(ctx, id, j.cmd == "/approve"); err != nil {
			ch.failed(ctx, j.cmd+" failed", err)
			return
		}
		// Decided: another /approve or /deny has nothing to decide (a
		// resume shows the call again if the decision was lost).
		ch.p.decided(id)
		verb := "approved"
		if j.cmd == "/deny" {
			verb = "denied"
		}
		ch.p.linef("%s tool %s", verb, name)
	}
}

// failed reports a job's error, unless the chat is ending anyway.
func (ch *chat) failed(ctx context.Context, what string, err error) {
	var se *ServerError
	switch {
	case ctx.Err() != nil || errors.Is(err, ErrClosed):
	case errors.As(err, &se):
		ch.p.linef("%s: the server refused it (%s: %s)", what, se.Code, se.Message)
	default:
		ch.p.linef("%s: %s", what, reason(err))
	}
}

// readLines reads in on its own goroutine; stop ends it (closing in when
// it is an io.Closer, for a read that blocks).
func readLines(in io.Reader) (<-chan string, func()) {
	lines := make(chan string)
	stop := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
	}()
	return lines, func() {
		close(stop)
		if cl, ok := in.(io.Closer); ok {
			_ = cl.Close()
		}
	}
}
