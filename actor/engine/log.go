package engine

import "unicode/utf8"

// The log's vocabulary: what the actor writes into entries and an engine
// reads back from TurnInput. PROTOCOL.md shows the same words to clients;
// gateway/wire's test pins them to it.

// Entry roles (record.Entry.Role).
const (
	RoleUser   = "user"
	RoleAgent  = "agent"
	RoleTool   = "tool"
	RoleSystem = "system"
)

// Metadata keys of entries (record.Entry.Metadata).
const (
	// MetaID is a user entry's send id (the client's `id`).
	MetaID = "id"
	// MetaReplyTo is the seq of the user entry an agent, tool or system
	// entry answers.
	MetaReplyTo = "reply_to"
	// MetaCallID, MetaName, MetaStatus, MetaArgs and MetaResult describe a
	// tool entry: its call, the tool, the call's status (the Tool*
	// statuses), the arguments (on started and awaiting_approval) and the
	// result (on completed and failed).
	MetaCallID = "call_id"
	MetaName   = "name"
	MetaStatus = "status"
	MetaArgs   = "args"
	MetaResult = "result"
	// MetaBy is the user who approved or denied a call.
	MetaBy = "by"
	// MetaCancelled marks the entry of a turn the user cancelled.
	MetaCancelled = "cancelled"
)

// Results the actor logs itself: ResultInterrupted for a call a crash
// cut short that may not run again (not idempotent, or run twice
// already), ResultCancelled for a call a cancel cut short, which is also
// the content of the system entry of a cancelled turn that showed no
// text.
const (
	ResultInterrupted = "interrupted"
	ResultCancelled   = "cancelled"
)

// Tool entry statuses (metadata.status), as PROTOCOL.md names them.
const (
	ToolAwaitingApproval = "awaiting_approval"
	ToolApproved         = "approved"
	ToolDenied           = "denied"
	ToolStarted          = "started"
	ToolCompleted        = "completed"
	ToolFailed           = "failed"
)

// Clip cuts s to at most n bytes on a rune boundary, marking a cut with
// an ellipsis: how an entry is quoted in a summary or an error message.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
