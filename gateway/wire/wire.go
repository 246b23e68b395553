package wire

// Frame types.
const (
	// Client → server.
	TypeHello    = "hello"
	TypeSend     = "send"
	TypeHistory  = "history"
	TypeContext  = "context"
	TypeComplete = "complete"
	TypePing     = "ping"
	TypeCancel   = "cancel"
	TypeApprove  = "approve"
	// Server → client (context is both).
	TypeSession      = "session"
	TypeHistoryBatch = "history_batch"
	TypeMessage      = "message"
	TypeAck          = "ack"
	TypeDelta        = "delta"
	TypeCompleted    = "completed"
	TypePong         = "pong"
	TypeError        = "error"
)

// Error codes of error frames.
const (
	CodeUnauthorized   = "unauthorized"
	CodeBadRequest     = "bad_request"
	CodeTooLarge       = "too_large"
	CodeRateLimited    = "rate_limited"
	CodeReauthRequired = "reauth_required"
	CodeUnavailable    = "unavailable"
	CodeInternal       = "internal"
)

// Close codes.
const (
	CloseNormal         = 1000 // after complete, or the client closed
	CloseUnsupported    = 1003 // a binary frame
	CloseInvalidPayload = 1007 // not UTF-8 or not JSON
	ClosePolicy         = 1008 // no hello in time, first frame not hello, bad token
	CloseTooBig         = 1009 // a frame over the limit
	CloseInternal       = 1011 // internal error
	CloseRestart        = 1012 // node shutting down or session moved: reconnect anywhere
	CloseTryAgain       = 1013 // too slow a reader, or the owner is unavailable
	CloseSuperseded     = 4001 // a newer connection resumed the session
	CloseReauth         = 4003 // the session is sensitive: log in again
)

// Reasons of a session frame.
const (
	ReasonResumed   = "resumed"
	ReasonNew       = "new"
	ReasonExpired   = "expired"
	ReasonNotFound  = "not_found"
	ReasonCompleted = "completed"
)

// Entry roles.
const (
	RoleUser   = "user"
	RoleAgent  = "agent"
	RoleTool   = "tool"
	RoleSystem = "system"
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
	// Attach "shared" keeps the session's other connections.
	Attach string `json:"attach,omitempty"`
	// send (and ping, whose id is echoed)
	ID        string         `json:"id,omitempty"`
	Content   string         `json:"content,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	Interrupt bool           `json:"interrupt,omitempty"`
	// cancel
	ReplyTo uint64 `json:"reply_to,omitempty"`
	// approve
	CallID   string `json:"call_id,omitempty"`
	Approved *bool  `json:"approved,omitempty"`
	// history
	BeforeSeq uint64 `json:"before_seq,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	// context
	Set map[string]any `json:"set,omitempty"`
}

// AttachShared is the hello's attach value that keeps the session's other
// connections.
const AttachShared = "shared"

// StreamMark is the hello's note of a partly received streamed reply: the
// client holds parts 0..Part of the reply that will become entry Seq.
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

// Ack confirms a send is durable as entry Seq.
type Ack struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Seq  uint64 `json:"seq"`
}

// Delta is part of a streamed agent reply that will become entry Seq:
// parts From..Part joined (From is omitted when it equals Part).
type Delta struct {
	Type string `json:"type"`
	Seq  uint64 `json:"seq"`
	Part int    `json:"part"`
	From *int   `json:"from,omitempty"`
	Text string `json:"text"`
}

// First is the first part the delta's text holds.
func (d Delta) First() int {
	if d.From != nil {
		return *d.From
	}
	return d.Part
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

// Pong answers a ping, echoing its id.
type Pong struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`
}

// ErrorFrame reports a failure; ID names the send it is about.
type ErrorFrame struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	ID      string `json:"id,omitempty"`
}

// Snapshot is the body of GET /v1/sessions/{id}.
type Snapshot struct {
	SessionID       string         `json:"session_id"`
	Status          string         `json:"status"`
	LastSeq         uint64         `json:"last_seq"`
	CreatedAt       float64        `json:"created_at"`
	LastActiveAt    float64        `json:"last_active_at"`
	ExpiresAt       *float64       `json:"expires_at,omitempty"`
	Context         map[string]any `json:"context"`
	AgentContext    map[string]any `json:"agent_context"`
	PendingToolCall *PendingTool   `json:"pending_tool_call"`
	Sensitive       bool           `json:"sensitive"`
	Messages        []Message      `json:"messages"`
}
