// Package client is the Go client library of the Tether wire protocol
// (PROTOCOL.md). It owns one client's view of one session: dialing any of
// several node URLs, the hello and resume handshake, reconnecting with
// exponential backoff and jitter, the idempotent resend of unacknowledged
// sends (same id) after a reconnect, and a message stream that holds every
// log entry exactly once and in seq order — duplicates are dropped and
// counted, gaps are counted and repaired by resuming from the last good seq,
// and entries a resume's history_batch omitted are paged in with history.
// It also owns Chat, the terminal chat that `tether chat` runs.
//
// It does not own the wire types (package gateway/wire) nor any server
// state.
//
// # Noticing a lost connection
//
// A connection can die without a close: a phone losing signal sends
// nothing. The client pings (a ping frame, PROTOCOL.md) after PingAfter
// without hearing anything from the server and gives the connection up
// when nothing comes within PongTimeout more: with the defaults (10s, 5s)
// a silent loss is noticed within 15s. A send not acknowledged within
// AckTimeout (15s) also gives the connection up. Either way the client
// reconnects, to the next URL, after a jittered backoff, and resumes; the
// unacknowledged sends go out again with their ids and are stored once.
// No step of a reconnect can hang: the token, the dial and the handshake
// are bounded by HandshakeTimeout, every write by WriteTimeout. A token
// from TokenFunc is reused while it is valid (its exp, read without
// verifying it, is more than a minute away), and asked for again only
// near expiry or after the server refused it.
//
// # Refused requests
//
// A send the server refuses is refused for good: too_large and
// bad_request come back as a *ServerError, a frame over the frame limit
// (Config.MaxFrame, checked before it is written, or one that made the
// server close with 1009) as an error matching ErrTooLarge. The send is
// not stored and never written again, and the client goes on (after a
// 1009 it reconnects without that send). rate_limited is not a refusal:
// the send waits and is written again. Refused tells the two apart.
//
// # Streamed replies
//
// The parts of an agent reply that the server streams (delta frames) are
// held, one reply at a time, by the rules of PROTOCOL.md (a delta from 0
// replaces what was held; the entry's message supersedes the parts; a
// delta after its message is ignored), offered on Partials as the text so
// far, and named in the hello after a reconnect (stream), so the server
// goes on from the next part.
//
// # Steering a turn, and sharing a session
//
// Cancel stops the running turn (its text so far stays, marked
// cancelled), Approve decides a tool call waiting for approval, and
// Interrupt sends a message that cancels the running turn first
// (PROTOCOL.md: cancel, approve, send while a turn runs). The server
// answers cancel and approve only with the entries they cause, so both
// return once their frame is written and are not written again after a
// reconnect. With Config.Shared the client attaches shared: other
// connections to the session stay open and all get every entry and
// delta live. Nothing else changes: Messages holds every entry once and
// in order, whichever connection caused it, and acks answer only this
// client's own sends.
//
// # Goroutines
//
// A Client runs one connection-manager goroutine, which alone holds the
// client's state (the session, the seqs, the pending requests, the
// streamed reply, the current socket and its heartbeat timer), plus one
// reader goroutine per open socket and at most one dial goroutine at a
// time. Public methods talk to the manager over channels; hooks
// (OnSession, OnConnect, OnDisconnect, OnRetry) run on it. Close stops
// all of them and waits.
//
// # Errors
//
// A Client ends for good (Done is closed, Err says why) on ErrClosed,
// ErrCompleted, ErrSuperseded, ErrReauthRequired, ErrUnauthorized,
// ErrSessionLost (a *SessionLostError) or ErrUnreachable. Every other close
// (1006, 1009, 1011, 1012, 1013, network errors, ErrSilent, ErrAckTimeout)
// is retried transparently. Error texts name the protocol (frame limit,
// close codes, error codes), not this package's identifiers.
//
// # Exported surface
//
//   - Client, New, Dial, Config: a client of one session (Send, SendID,
//     Interrupt, InterruptID, Cancel, Approve, SetContext, History,
//     Complete, Messages, Partials, LastSeq, SessionID, Ready, Done, Err,
//     Stats, Drop, Close).
//   - Partial: a streamed reply as far as it has come; Stats: the
//     client's counters.
//   - ServerError, SessionLostError, Refused: an error frame, a resume
//     answered with a new session, and whether a request was refused for
//     good.
//   - ErrClosed, ErrCompleted, ErrSuperseded, ErrReauthRequired,
//     ErrUnauthorized, ErrSessionLost, ErrUnreachable: why a Client ended.
//   - ErrSilent, ErrAckTimeout: why a connection was given up and
//     replaced.
//   - ErrTooLarge: a send refused for its size.
//   - Chat, ChatConfig, ChatHelp, FormatMessage: the terminal chat.
//   - LoadCA, ErrBadCA: trusting a private CA alone.
//   - TokenSubject: a token's user, read without verifying it.
package client
