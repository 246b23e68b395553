//go:build linux || darwin || freebsd || netbsd || openbsd

package cork

import (
	"errors"
	"syscall"
	"time"
)

// TryWrite writes p now if the socket takes all of it without waiting,
// and reports whether it did: the server's heartbeat pings an idle
// connection this way, on the goroutine that keeps the clock, instead of
// starting the connection's writer (a goroutine and its stack) for two
// bytes. Nothing written (the socket is full, closed, or cannot be
// written to this way; a write is corked or a frame torn) leaves the
// stream as it was, for the writer to write p as usual. Part of p written
// (the kernel had room for less: the peer stopped reading) keeps the rest
// for Finish, as a torn Uncork does, and returns ErrTorn: the
// connection's next frame must be its close frame. Writer only: the
// caller holds the connection's writer role.
func (c *Conn) TryWrite(p []byte) (bool, error) {
	c.mu.Lock()
	busy := c.corked || len(c.torn) > 0
	c.mu.Unlock()
	sc, ok := c.Conn.(syscall.Conn)
	if busy || !ok {
		return false, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false, nil
	}
	// The writer's last deadline has passed by now; no wait follows.
	if err := c.Conn.SetWriteDeadline(time.Time{}); err != nil {
		return false, nil
	}
	var n int
	var werr error
	err = raw.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), p)
			if !errors.Is(werr, syscall.EINTR) {
				return true // one try: never wait for room
			}
		}
	})
	switch {
	case err != nil || werr != nil || n <= 0:
		return false, nil // the writer meets any error again
	case n < len(p):
		c.torn = append(c.torn[:0], p[n:]...)
		return false, ErrTorn
	}
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return true, nil
}
