package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
)

// maxStreamQueue bounds what waits to go to a client attached through
// another node; a stream that falls that far behind is dropped and its
// client reconnects (the log keeps everything).
const maxStreamQueue = 1024

// accept serves a session stream: a client attached to another node,
// whose session this node owns.
func (c *Cluster) accept(from string, method Op, body msgpack.RawMessage, s *Stream) {
	defer s.Close()
	if method != methodSession {
		c.log.Warn("unknown stream", "method", method, "from", from)
		return
	}
	var req sessionReq
	if err := msgpack.Unmarshal(body, &req); err != nil {
		c.log.Warn("bad session stream", "from", from, "err", err)
		return
	}
	sc := &streamConn{c: c, s: s}
	if req.Frames {
		sc.encode = c.cfg.EncodeFrame
	}
	h, err := c.openLocal(req, sc)
	if err != nil {
		code := ErrorCode(withActorCode(err))
		if code == "" {
			code = "internal"
			c.log.Error("open forwarded session", "session", req.SID, "from", from, "err", err)
		}
		_ = s.Send(c.ctx, sessionResult{Code: code, Reason: req.Reason, Message: err.Error()})
		return
	}
	c.stats.served.Add(1)
	if err := s.Send(c.ctx, sessionResult{}); err != nil {
		h.Detach()
		return
	}
	sc.start() // what the actor said while opening follows the answer
	for {
		raw, err := s.Recv(c.ctx)
		if err != nil {
			h.Detach() // the client's gateway went, or the link did
			sc.stop()
			return
		}
		var op opMsg
		if err := msgpack.Unmarshal(raw, &op); err != nil {
			c.log.Warn("bad op on a session stream", "from", from, "err", err)
			continue
		}
		if err := c.apply(h, op); err != nil {
			h.Detach()
			sc.stop()
			return
		}
	}
}

func (c *Cluster) openLocal(req sessionReq, conn machine.Conn) (*actor.Handle, error) {
	reg, err := c.registry()
	if err != nil {
		return nil, actor.ErrClosed
	}
	if !c.Owns(req.SID) {
		// The gateway's view is not this node's (gossip is settling). An
		// actor started here would be one no membership change moves
		// away, and it would keep the owner from claiming the session:
		// the gateway retries with the owner it finds next.
		return nil, fmt.Errorf("%w: %s does not own %s", ErrUnavailable, c.cfg.Self.ID, req.SID)
	}
	c.dropStale(c.ctx, reg, req.SID)
	if req.Reason != "" {
		return reg.Create(c.ctx, actor.CreateRequest{SessionID: req.SID, UserID: req.User, Reason: req.Reason, Conn: conn})
	}
	h, err := reg.Resume(c.ctx, actor.ResumeRequest{
		SessionID: req.SID, UserID: req.User, LastSeq: req.LastSeq, AuthTime: req.AuthTime, Stream: req.Stream, Conn: conn, Shared: req.Shared,
	})
	if err != nil {
		return nil, c.staleResume(c.ctx, req.SID, err)
	}
	return h, nil
}

func (c *Cluster) apply(h *actor.Handle, op opMsg) error {
	ctx := c.ctx
	switch op.Op {
	case "send":
		return h.Send(ctx, op.ID, op.Content, op.Metadata)
	case "interrupt":
		return h.Interrupt(ctx, op.ID, op.Content, op.Metadata)
	case "cancel":
		return h.Cancel(ctx, op.ReplyTo)
	case "approve":
		return h.Approve(ctx, op.CallID, op.Approved)
	case "history":
		return h.History(ctx, op.Before, op.Limit)
	case "context":
		return h.SetContext(ctx, op.Set)
	case "complete":
		return h.Complete(ctx)
	}
	c.log.Warn("unknown op on a session stream", "op", op.Op)
	return nil
}

// streamConn is the machine.Conn of a client attached through another node:
// what the actor says is queued and sent over the stream by a goroutine
// that runs while there is something to send (Deliver never blocks).
type streamConn struct {
	c *Cluster
	s *Stream
	// encode, when set, encodes history batches for the client here.
	encode func(machine.Out) ([]byte, error)

	mu      sync.Mutex
	queue   []outMsg
	started bool // the open was answered: the queue may go
	sending bool
	dead    bool
}

var _ machine.Conn = (*streamConn)(nil)

func (sc *streamConn) Deliver(o machine.Out) {
	if b, ok := o.(*machine.BatchOut); ok && sc.encode != nil {
		if f, err := sc.encode(b); err == nil {
			sc.c.stats.frames.Add(1)
			sc.push(outMsg{Frame: f})
			return
		}
		// Not encodable here: it goes as msgpack, and the client's
		// gateway reports what it cannot encode either.
	}
	sc.push(outOf(o))
}

func (sc *streamConn) Close(why machine.CloseReason, msg string) {
	sc.push(outMsg{Close: &closeMsg{Why: why, Msg: msg}})
}

func (sc *streamConn) push(m outMsg) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.dead {
		return
	}
	if len(sc.queue) >= maxStreamQueue {
		// The client fell too far behind: drop it; it resumes.
		sc.dead, sc.queue = true, nil
		go func() { _ = sc.s.Close() }()
		return
	}
	sc.queue = append(sc.queue, m)
	sc.kick()
}

func (sc *streamConn) start() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.started = true
	sc.kick()
}

func (sc *streamConn) stop() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.dead, sc.queue = true, nil
}

// kick starts the sender if there is work and none runs. mu is held.
func (sc *streamConn) kick() {
	if !sc.started || sc.sending || len(sc.queue) == 0 {
		return
	}
	sc.sending = true
	sc.c.wg.Add(1)
	go sc.send()
}

func (sc *streamConn) send() {
	defer sc.c.wg.Done()
	for {
		sc.mu.Lock()
		batch := sc.queue
		sc.queue = nil
		if len(batch) == 0 || sc.dead {
			sc.sending = false
			sc.mu.Unlock()
			return
		}
		sc.mu.Unlock()
		for _, m := range batch {
			if err := sc.s.Send(sc.c.ctx, m); err != nil {
				if !errors.Is(err, context.Canceled) {
					sc.c.log.Debug("session stream send failed", "err", err)
				}
				sc.stop()
				sc.mu.Lock()
				sc.sending = false
				sc.mu.Unlock()
				return
			}
		}
	}
}
