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
// It does not own the wire types (package gateway) nor any server state.
//
// # Goroutines
//
// A Client runs one connection-manager goroutine, which alone holds the
// client's state (the session, the seqs, the pending requests, the current
// socket), plus one reader goroutine per open socket and at most one dial
// goroutine at a time. Public methods talk to the manager over channels;
// Close stops all of them and waits.
//
// # Errors
//
// A Client ends for good (Done is closed, Err says why) on ErrClosed,
// ErrCompleted, ErrSuperseded, ErrReauthRequired, ErrUnauthorized,
// ErrSessionLost (a *SessionLostError) or ErrUnreachable. Every other close
// (1006, 1011, 1012, 1013, network errors) is retried transparently.
// A refused send is a *ServerError (or ErrTooLarge, found before it is
// sent); the client goes on.
package client
