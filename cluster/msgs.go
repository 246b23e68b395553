package cluster

import (
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/wal"
)

// Methods of the node link.
const (
	methodHead      = "head"      // headReq → headResp: a node's copy of a session, if any
	methodRead      = "read"      // readReq → readResp: entries of a copy, for pulls and catch-ups
	methodCopy      = "copy"      // wal.Copy → struct{}: replication (fenced)
	methodSnapshot  = "snapshot"  // snapshotReq → snapshotResp: GET /v1/sessions/{id} at the owner
	methodSession   = "session"   // stream: a client attached through another node
	methodFence     = "fence"     // fenceReq → fenceResp: raise a copy's epoch, then report its head
	methodStatus    = "status"    // struct{} → statusResp: the leader's probe of a member's link and Raft
	methodReadIndex = "readindex" // struct{} → readIndexResp: at the leader, its confirmed commit index
	methodAdopt     = "adopt"     // headReq → struct{}: at the owner, bring the session's copies onto its write set
	methodLeave     = "leave"     // leaveReq → struct{}: at the leader, take a member out of the configuration
	methodReport    = "report"    // reportReq → struct{}: at the leader, the caller's link to a member failed
)

// Link error codes (link.WithCode) the other side maps to sentinels.
const (
	codeStaleEpoch  = "stale_epoch"
	codeSeqGap      = "seq_gap"
	codeDiverged    = "diverged"
	codeNotFound    = "not_found"
	codeReauth      = "reauth_required"
	codeBadLastSeq  = "bad_last_seq"
	codeTooMany     = "too_many_sessions"
	codeTooManyConn = "too_many_conns"
	codeExists      = "exists"
	codeClosed      = "closed"
	codeUnavailable = "unavailable"
)

type headReq struct {
	SID string `msgpack:"s"`
}

type headResp struct {
	Found  bool       `msgpack:"f"`
	Header wal.Header `msgpack:"h"`
}

type fenceReq struct {
	SID   string `msgpack:"s"`
	Epoch uint64 `msgpack:"e"`
	Owner string `msgpack:"o"`
}

// fenceResp is the copy's head after the fence; Stale > 0 instead says
// the copy is at that newer epoch and was not fenced.
type fenceResp struct {
	Found  bool       `msgpack:"f"`
	Header wal.Header `msgpack:"h"`
	Stale  uint64     `msgpack:"x,omitempty"`
}

type statusResp struct {
	Applied uint64 `msgpack:"a"`
	Config  uint64 `msgpack:"c"`
}

type leaveReq struct {
	ID string `msgpack:"i"`
}

// readReq asks for entries lo <= seq < hi of a copy (at most Limit), with
// the send ids of seq >= lo when Sends is set, and the header and context.
type readReq struct {
	SID   string `msgpack:"s"`
	Lo    uint64 `msgpack:"l"`
	Hi    uint64 `msgpack:"h"`
	Limit int    `msgpack:"n"`
	Sends bool   `msgpack:"d"`
}

type readResp struct {
	Data    wal.SessionData `msgpack:"x"`
	Entries []wal.Entry     `msgpack:"e"`
	Sends   []wal.Send      `msgpack:"d"`
}

type snapshotReq struct {
	SID      string    `msgpack:"s"`
	User     string    `msgpack:"u"`
	AuthTime time.Time `msgpack:"a"`
}

type snapshotResp struct {
	Snap actor.Snapshot `msgpack:"s"`
}

// sessionReq opens a forwarded session: a resume, or a create when Reason
// is set.
type sessionReq struct {
	SID      string            `msgpack:"s"`
	User     string            `msgpack:"u"`
	LastSeq  uint64            `msgpack:"l"`
	AuthTime time.Time         `msgpack:"a"`
	Stream   *actor.StreamMark `msgpack:"m,omitempty"`
	Reason   string            `msgpack:"r,omitempty"`
	// Frames: the client's gateway takes frames encoded by the owner
	// (outMsg.Frame).
	Frames bool `msgpack:"f,omitempty"`
	// Shared: the client attaches shared (the other connections stay).
	Shared bool `msgpack:"sh,omitempty"`
}

// sessionResult is the first value on a session stream from the owner:
// the error code of a refused open, or ok.
type sessionResult struct {
	Code    string `msgpack:"c,omitempty"`
	Reason  string `msgpack:"r,omitempty"` // of a NotResumedError
	Message string `msgpack:"m,omitempty"`
}

// outMsg is one thing the owner's actor tells a client attached elsewhere:
// exactly one field is set.
type outMsg struct {
	Session   *actor.SessionOut   `msgpack:"s,omitempty"`
	Batch     *actor.BatchOut     `msgpack:"b,omitempty"`
	Entry     *actor.EntryOut     `msgpack:"e,omitempty"`
	Ack       *actor.AckOut       `msgpack:"a,omitempty"`
	Context   *actor.ContextOut   `msgpack:"x,omitempty"`
	Completed *actor.CompletedOut `msgpack:"d,omitempty"`
	Error     *actor.ErrorOut     `msgpack:"r,omitempty"`
	Delta     *actor.DeltaOut     `msgpack:"t,omitempty"`
	Close     *closeMsg           `msgpack:"c,omitempty"`
	// Frame is a frame the owner encoded for the client (a history
	// batch), sent only when the session was opened with Frames.
	Frame []byte `msgpack:"f,omitempty"`
}

type closeMsg struct {
	Why actor.CloseReason `msgpack:"w"`
	Msg string            `msgpack:"m"`
}

// opMsg is one thing the client does, sent by its gateway to the owner.
type opMsg struct {
	Op       string         `msgpack:"o"` // send, interrupt, history, context, complete, cancel, approve
	ID       string         `msgpack:"i,omitempty"`
	Content  string         `msgpack:"c,omitempty"`
	Metadata map[string]any `msgpack:"m,omitempty"`
	Before   uint64         `msgpack:"b,omitempty"`
	Limit    int            `msgpack:"l,omitempty"`
	Set      map[string]any `msgpack:"s,omitempty"`
	// cancel: the turn answering ReplyTo (0: the running one).
	ReplyTo uint64 `msgpack:"rt,omitempty"`
	// approve: the call and the decision.
	CallID   string `msgpack:"ci,omitempty"`
	Approved bool   `msgpack:"ap,omitempty"`
}

func outOf(o actor.Out) outMsg {
	switch o := o.(type) {
	case *actor.SessionOut:
		return outMsg{Session: o}
	case *actor.BatchOut:
		return outMsg{Batch: o}
	case *actor.EntryOut:
		return outMsg{Entry: o}
	case *actor.AckOut:
		return outMsg{Ack: o}
	case *actor.ContextOut:
		return outMsg{Context: o}
	case *actor.CompletedOut:
		return outMsg{Completed: o}
	case *actor.ErrorOut:
		return outMsg{Error: o}
	case *actor.DeltaOut:
		return outMsg{Delta: o}
	}
	return outMsg{Error: &actor.ErrorOut{Code: actor.CodeInternal, Message: "the owner sent something this node does not know"}}
}

// out is the actor.Out m carries, or nil for a close.
func (m outMsg) out() actor.Out {
	switch {
	case m.Session != nil:
		return m.Session
	case m.Batch != nil:
		return m.Batch
	case m.Entry != nil:
		return m.Entry
	case m.Ack != nil:
		return m.Ack
	case m.Context != nil:
		return m.Context
	case m.Completed != nil:
		return m.Completed
	case m.Error != nil:
		return m.Error
	case m.Delta != nil:
		return m.Delta
	}
	return nil
}
