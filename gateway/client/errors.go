package client

import (
	"errors"
	"fmt"

	"github.com/tether-dev/tether/gateway/wire"
)

// Reasons a Client ends; see Err.
var (
	// ErrClosed: Close was called.
	ErrClosed = errors.New("client: closed")
	// ErrCompleted: the session was completed (Complete, close 1000).
	ErrCompleted = errors.New("client: session completed")
	// ErrSuperseded: a newer connection resumed the session (close 4001).
	// The client does not fight it.
	ErrSuperseded = errors.New("client: superseded by a newer connection to the session")
	// ErrReauthRequired: the session is sensitive and the token's
	// auth_time is too old (close 4003). Dial again with a fresh login.
	ErrReauthRequired = errors.New("client: the session is sensitive: log in again to resume it")
	// ErrUnauthorized: the token was refused (close 1008).
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrSessionLost: the session could not be resumed; the error is a
	// *SessionLostError.
	ErrSessionLost = errors.New("client: session could not be resumed")
	// ErrUnreachable: Config.MaxAttempts consecutive attempts failed.
	ErrUnreachable = errors.New("client: no server reachable")
)

// ErrTooLarge matches a send refused for its size, which is never written
// again; the client goes on. It is found before the send is written (its
// frame is over the frame limit), or the server closed with 1009 on it, or
// the server answered too_large (a *ServerError, which matches it too).
var ErrTooLarge = errors.New("client: too large")

// Reasons a connection is given up and replaced; OnDisconnect sees them.
var (
	// ErrSilent: nothing came from the server within PongTimeout of a ping
	// sent after PingAfter of silence.
	ErrSilent = errors.New("client: the connection went silent")
	// ErrAckTimeout: a send written on the socket was not acknowledged
	// within AckTimeout.
	ErrAckTimeout = errors.New("client: the server did not answer in time")
)

// ServerError is an error frame from the server, e.g. a refused send
// (too_large, bad_request) or the reason for a close. errors.Is matches
// ErrUnauthorized and ErrReauthRequired by Code.
type ServerError struct {
	Code    string // wire.Code*
	Message string
	ID      string // the send it is about, if any
}

func (e *ServerError) Error() string {
	if e.ID != "" {
		return fmt.Sprintf("server error %s (send %s): %s", e.Code, e.ID, e.Message)
	}
	return fmt.Sprintf("server error %s: %s", e.Code, e.Message)
}

// Is maps codes to this package's sentinels.
func (e *ServerError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Code == wire.CodeUnauthorized
	case ErrReauthRequired:
		return e.Code == wire.CodeReauthRequired
	case ErrTooLarge:
		return e.Code == wire.CodeTooLarge
	}
	return false
}

// Refused reports whether err is a request the server (or the client's
// own check of the frame limit) refused for good: too_large, bad_request,
// a frame over the limit. Such a send was not stored and is not written
// again; the client goes on.
func Refused(err error) bool {
	var se *ServerError
	if errors.As(err, &se) {
		return se.Code == wire.CodeTooLarge || se.Code == wire.CodeBadRequest
	}
	return errors.Is(err, ErrTooLarge)
}

// SessionLostError says a resume was answered with resumed:false. The
// server has then created a new, empty session (NewSessionID) on that
// connection; the client does not silently continue in it — pending
// sends fail with this error — but a caller may Dial again with
// SessionID: NewSessionID (LastSeq 0) to go on there.
type SessionLostError struct {
	SessionID    string // the session that was asked for
	Reason       string // expired, not_found, completed
	NewSessionID string
}

func (e *SessionLostError) Error() string {
	return fmt.Sprintf("client: session %s could not be resumed (%s); the server started %s", e.SessionID, e.Reason, e.NewSessionID)
}

// Is matches ErrSessionLost.
func (e *SessionLostError) Is(target error) bool { return target == ErrSessionLost }
