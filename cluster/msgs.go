package cluster

import (
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// Operations of the node link.
const (
	methodHead      Op = "head"      // headReq → headResp: a node's copy of a session, if any
	methodRead      Op = "read"      // readReq → readResp: entries of a copy, for pulls and catch-ups
	methodCopy      Op = "copy"      // wal.Copy → struct{}: replication (fenced)
	methodSnapshot  Op = "snapshot"  // snapshotReq → snapshotResp: GET /v1/sessions/{id} at the owner
	methodSession   Op = "session"   // stream: a client attached through another node
	methodFence     Op = "fence"     // fenceReq → fenceResp: raise a copy's epoch, then report its head
	methodStatus    Op = "status"    // struct{} → statusResp: the leader's probe of a member's link and Raft
	methodReadIndex Op = "readindex" // struct{} → readIndexResp: at the leader, its confirmed commit index
	methodAdopt     Op = "adopt"     // headReq → struct{}: at the owner, bring the session's copies onto its write set
	methodLeave     Op = "leave"     // leaveReq → struct{}: at the leader, take a member out of the configuration
	methodReport    Op = "report"    // reportReq → struct{}: at the leader, the caller's link to a member failed
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
	SID      string              `msgpack:"s"`
	User     string              `msgpack:"u"`
	LastSeq  uint64              `msgpack:"l"`
	AuthTime time.Time           `msgpack:"a"`
	Stream   *machine.StreamMark `msgpack:"m,omitempty"`
	Reason   string              `msgpack:"r,omitempty"`
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
	Session   *machine.SessionOut   `msgpack:"s,omitempty"`
	Batch     *machine.BatchOut     `msgpack:"b,omitempty"`
	Entry     *machine.EntryOut     `msgpack:"e,omitempty"`
	Ack       *machine.AckOut       `msgpack:"a,omitempty"`
	Context   *machine.ContextOut   `msgpack:"x,omitempty"`
	Completed *machine.CompletedOut `msgpack:"d,omitempty"`
	Error     *machine.ErrorOut     `msgpack:"r,omitempty"`
	Delta     *machine.DeltaOut     `msgpack:"t,omitempty"`
	Close     *closeMsg             `msgpack:"c,omitempty"`
	// Frame is a frame the owner encoded for the client (a history
	// batch), sent only when the session was opened with Frames.
	Frame []byte `msgpack:"f,omitempty"`
}

type closeMsg struct {
	Why machine.CloseReason `msgpack:"w"`
	Msg string              `msgpack:"m"`
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

func outOf(o machine.Out) outMsg {
	switch o := o.(type) {
	case *machine.SessionOut:
		return outMsg{Session: o}
	case *machine.BatchOut:
		// Decoded, the batch goes as it always went (a node of an
		// earlier version reads it); a node that can encodes batches for
		// its peers' clients itself (streamConn.Deliver).
		b, err := o.Decoded()
		if err != nil {
			return outMsg{Error: &machine.ErrorOut{Code: machine.CodeInternal, Message: "reading the session failed"}}
		}
		return outMsg{Batch: b}
	case *machine.EntryOut:
		return outMsg{Entry: o}
	case *machine.AckOut:
		return outMsg{Ack: o}
	case *machine.ContextOut:
		return outMsg{Context: o}
	case *machine.CompletedOut:
		return outMsg{Completed: o}
	case *machine.ErrorOut:
		return outMsg{Error: o}
	case *machine.DeltaOut:
		return outMsg{Delta: o}
	}
	return outMsg{Error: &machine.ErrorOut{Code: machine.CodeInternal, Message: "the owner sent something this node does not know"}}
}

// out is the machine.Out m carries, or nil for a close.
func (m outMsg) out() machine.Out {
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
