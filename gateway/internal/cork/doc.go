// Package cork is the gateway's socket: a net.Conn under gorilla's
// WebSocket that does two things gorilla cannot.
//
// Corked writes (cork.go). Between Cork and Uncork every write is
// gathered, and Text frames payloads itself (unfragmented, unmasked text
// frames, as a server sends them), so a connection's writer puts
// everything queued on the wire with one write. Invariant: only the
// connection's one writer goroutine corks, and it sets the write deadline
// once per corked batch.
//
// Room for the close frame (cork.go, notsent_linux.go). Every accepted
// socket may hold only NotSentLimit bytes the kernel has not sent
// (TCP_NOTSENT_LOWAT): a client that reads never meets the limit, and one
// that stopped reading leaves its socket far from full, so a close frame
// still fits. A write cut short leaves the rest of its frame for Finish,
// which writes it before the close frame. Invariant: the connection's
// last frame is written after Finish.
//
// Idle waits (idle.go). Between messages the reader waits for the socket
// to become readable itself (WaitIdle), one call below its read loop, so
// that an idle connection's goroutine stack shrinks to 2 KiB instead of
// staying at gorilla's 4 KiB. Invariant: WaitIdle waits only when gorilla
// holds nothing unread, which the Conn knows by following the frame
// boundaries in the bytes it hands gorilla (frameTracker) against the
// count of messages the reader took (Idle's argument); the bytes that end
// a wait are handed to gorilla before anything else is read, and a lone
// pong is read off here so it does not wake gorilla's reader.
//
// Parked waits (park.go, poller_linux.go). Better than a small stack is
// none: an idle connection's socket is parked in a Poller (one epoll set
// and one goroutine per server, which waits for the set through the
// runtime's poller rather than in a blocking epoll_wait that would hold
// its P), and its reader is woken on a worker when
// the client sends something, when the connection is closed, or when a
// read deadline is set. Invariant: the wake comes exactly once per Park,
// from whoever takes the connection out of the set; after a Close or a
// read deadline the connection never parks again, so the deadline is
// enforced by a reader that waits.
//
// Heartbeats without a writer (trywrite_unix.go). TryWrite puts a frame
// on the wire only if the socket takes it whole at once, so the server's
// ping to an idle connection costs a system call on the clock's
// goroutine, not a writer goroutine. Invariant: it is called only by
// whoever holds the connection's writer role, never while corked, and a
// part-written frame is torn as a failed Uncork's is.
//
// The exported surface: Listener (wraps accepted connections; Pool holds
// the gathering buffers, Poller parks idle ones), Conn (Start, Idle,
// WaitIdle, Park, Ready, Cork, Text, Uncork, TryWrite, Finish, Writes, Close,
// SetReadDeadline, SetDeadline), Poller (NewPoller, Parked, Close),
// NotSentLimit, Unwrap, ErrTorn.
package cork
