// Package httpagent is the `--agent http` engine: an agent written in any
// language, behind an HTTP endpoint, driven as gateway/AGENT-PROTOCOL.md
// says. Tether keeps the session (the log, the journal of tool calls); the
// endpoint only decides, one step request at a time, what comes next, and
// runs tools when asked with a tool request.
//
// The engine is an engine.Streamer (a step's text parts become deltas, so a
// reply resumes mid-way as any streamed reply does) and an
// engine.CallRunner (the endpoint names and declares each tool with its
// call, so the actor runs calls through RunCall with the session's and the
// call's ids, and the call's idempotent flag is kept with the pending call
// across crashes).
//
// Every request is signed (Tether-Signature: HMAC-SHA256 over the
// timestamp and the body) and carries an Idempotency-Key that is the same
// for every retry of it, across crashes too: a step's key is derived from
// the log (the session, the user entry, how many tool calls the turn has
// logged), a tool's from the call id. Connection errors, 429 and 5xx are
// retried with backoff and jitter, honouring Retry-After, within
// Config.Timeout for the whole request; anything else, and a stream that
// breaks or ends without its final line, is an error the actor logs as
// "agent error: …". A tool request for a call not declared idempotent is
// retried only when it cannot have reached the endpoint (no connection
// made, nothing written, or 429), so a tool runs at most once.
//
// The engine holds no per-session state: each request runs in the
// goroutine the actor gives its step, on a transport with no per-host
// connection cap, so a slow or dead endpoint for one session holds up no
// other.
//
// The exported surface:
//
//   - Agent, New, Config: the engine (Next, Stream, RunCall, Tool, Close).
//   - Sign: the Tether-Signature header of a request body sent at a time,
//     for endpoints and tests that check it.
//   - ErrStatus, ErrBadLine, ErrNoFinal, ErrTimeout: what the errors of a
//     failed request wrap.
package httpagent
