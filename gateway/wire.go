package gateway

import (
	"encoding/json"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/wal"
)

// Frame types of PROTOCOL.md.
const (
	TypeHello        = "hello"
	TypeSend         = "send"
	TypeHistory      = "history"
	TypeContext      = "context"
	TypeComplete     = "complete"
	TypeSession      = "session"
	TypeHistoryBatch = "history_batch"
	TypeMessage      = "message"
	TypeAck          = "ack"
	TypeDelta        = "delta"
	TypeCompleted    = "completed"
	TypeError        = "error"
)

// Error codes of PROTOCOL.md.
const (
	CodeUnauthorized   = "unauthorized"
	CodeBadRequest     = "bad_request"
	CodeTooLarge       = "too_large"
	CodeRateLimited    = "rate_limited"
	CodeReauthRequired = "reauth_required"
	CodeUnavailable    = "unavailable"
	CodeInternal       = "internal"
)

// Close codes of PROTOCOL.md.
const (
	CloseNormal         = 1000
	CloseUnsupported    = 1003
	CloseInvalidPayload = 1007
	ClosePolicy         = 1008
	CloseTooBig         = 1009
	CloseInternal       = 1011
	CloseRestart        = 1012
	CloseTryAgain       = 1013
	CloseSuperseded     = 4001
	CloseReauth         = 4003
)

// ClientFrame is any frame a client sends; which fields count depends on
// Type. Unknown fields are ignored.
type ClientFrame struct {
	Type string `json:"type"`
	// hello
	Token     string      `json:"token,omitempty"`
	SessionID string      `json:"session_id,omitempty"`
	LastSeq   uint64      `json:"last_seq,omitempty"`
	Stream    *StreamMark `json:"stream,omitempty"`
	// send
	ID       string         `json:"id,omitempty"`
	Content  string         `json:"content,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
	// history
	BeforeSeq uint64 `json:"before_seq,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	// context
	Set map[string]any `json:"set,omitempty"`
}

// StreamMark is the hello's note of a partly received streamed reply.
type StreamMark struct {
	Seq  uint64 `json:"seq"`
	Part int    `json:"part"`
}

// Message is one log entry on the wire.
type Message struct {
	Type      string         `json:"type,omitempty"`
	Seq       uint64         `json:"seq"`
	Role      string         `json:"role"`
	Content   string         `json:"content"`
	Timestamp float64        `json:"timestamp"`
	Metadata  map[string]any `json:"metadata"`
}

// SessionFrame answers a hello.
type SessionFrame struct {
	Type            string         `json:"type"`
	SessionID       string         `json:"session_id"`
	Resumed         bool           `json:"resumed"`
	Reason          string         `json:"reason"`
	Status          string         `json:"status"`
	LastSeq         uint64         `json:"last_seq"`
	WindowS         float64        `json:"window_s"`
	Context         map[string]any `json:"context"`
	PendingToolCall *PendingTool   `json:"pending_tool_call"`
	Sensitive       bool           `json:"sensitive"`
}

// PendingTool is the in-flight tool call in a session frame or snapshot.
type PendingTool struct {
	CallID     string         `json:"call_id"`
	Name       string         `json:"name"`
	Args       map[string]any `json:"args"`
	Status     string         `json:"status"`
	Partial    string         `json:"partial,omitempty"`
	StartedSeq uint64         `json:"started_seq"`
}

// HistoryBatch is a resume's replay or a history page.
type HistoryBatch struct {
	Type     string    `json:"type"`
	Messages []Message `json:"messages"`
	FirstSeq uint64    `json:"first_seq"`
	LastSeq  uint64    `json:"last_seq"`
	Omitted  uint64    `json:"omitted"`
	Summary  *string   `json:"summary"`
}

// Ack confirms a send.
type Ack struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Seq  uint64 `json:"seq"`
}

// ContextFrame carries the merged user context.
type ContextFrame struct {
	Type    string         `json:"type"`
	Context map[string]any `json:"context"`
}

// CompletedFrame confirms a complete.
type CompletedFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
}

// ErrorFrame reports a failure.
type ErrorFrame struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	ID      string `json:"id,omitempty"`
}

// MessageOf converts a log entry to its wire form.
func MessageOf(e wal.Entry, typ string) Message {
	md := e.Metadata
	if md == nil {
		md = map[string]any{}
	}
	return Message{Type: typ, Seq: e.Seq, Role: e.Role, Content: e.Content, Timestamp: e.Time, Metadata: md}
}

// PendingOf converts the pending tool call, if any.
func PendingOf(p *wal.ToolCall) *PendingTool {
	if p == nil {
		return nil
	}
	args := p.Args
	if args == nil {
		args = map[string]any{}
	}
	return &PendingTool{CallID: p.CallID, Name: p.Name, Args: args, Status: p.Status, Partial: p.Partial, StartedSeq: p.StartedSeq}
}

func nonNil(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// encodeOut turns what an actor says into the bytes of one text frame.
func encodeOut(o actor.Out) ([]byte, error) {
	var v any
	switch o := o.(type) {
	case *actor.SessionOut:
		v = SessionFrame{
			Type: TypeSession, SessionID: o.SessionID, Resumed: o.Resumed, Reason: o.Reason,
			Status: string(o.Status), LastSeq: o.LastSeq, WindowS: o.Window.Seconds(),
			Context: nonNil(o.Context), PendingToolCall: PendingOf(o.Pending), Sensitive: o.Sensitive,
		}
	case *actor.BatchOut:
		v = batchFrame(o)
	case *actor.EntryOut:
		v = MessageOf(o.Entry, TypeMessage)
	case *actor.AckOut:
		v = Ack{Type: TypeAck, ID: o.ID, Seq: o.Seq}
	case *actor.ContextOut:
		v = ContextFrame{Type: TypeContext, Context: nonNil(o.Context)}
	case *actor.CompletedOut:
		v = CompletedFrame{Type: TypeCompleted, SessionID: o.SessionID}
	case *actor.ErrorOut:
		v = ErrorFrame{Type: TypeError, Code: o.Code, Message: o.Message, ID: o.ID}
	default:
		v = ErrorFrame{Type: TypeError, Code: CodeInternal, Message: "unknown server frame"}
	}
	return json.Marshal(v)
}

func batchFrame(o *actor.BatchOut) HistoryBatch {
	b := HistoryBatch{Type: TypeHistoryBatch, Messages: make([]Message, len(o.Messages)), Omitted: o.Omitted}
	for i, e := range o.Messages {
		b.Messages[i] = MessageOf(e, "")
	}
	if n := len(o.Messages); n > 0 {
		b.FirstSeq, b.LastSeq = o.Messages[0].Seq, o.Messages[n-1].Seq
	}
	if o.Summary != "" {
		s := o.Summary
		b.Summary = &s
	}
	return b
}
