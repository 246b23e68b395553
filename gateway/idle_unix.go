//go:build linux || darwin || freebsd || netbsd || openbsd

package gateway

import (
	"errors"
	"syscall"
)

// errNoWait: the connection has no file descriptor to wait on.
var errNoWait = errors.New("gateway: connection cannot be waited on")

// waitReadable blocks until the socket has bytes (or an error, or the end)
// and returns a peek at the first of them, which stay in the socket.
func (c *corkConn) waitReadable() ([]byte, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNoWait
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	// Only a pong matters to the caller: peek at most that much.
	buf := make([]byte, maxPong)
	var n int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		// Check the socket before waiting: the poller only wakes on new
		// readiness, and bytes may already be there.
		n, _, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return !errors.Is(rerr, syscall.EAGAIN)
	})
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	return buf[:max(n, 0)], nil
}
