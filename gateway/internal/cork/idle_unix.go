//go:build linux || darwin || freebsd || netbsd || openbsd

package cork

import (
	"errors"
	"io"
	"syscall"
)

// errNoWait: the connection has no file descriptor to wait on.
var errNoWait = errors.New("cork: connection cannot be waited on")

// errEmpty: takeReadable found nothing to take.
var errEmpty = errors.New("cork: nothing to read")

// waitReadable blocks until the socket has bytes (or an error, or the
// end) and takes what is there (up to a pooled buffer's size) into
// c.pending. Taking the bytes rather than peeking at them
// spares gorilla's reader a second system call for them. No buffer is
// held while waiting: an idle connection keeps none.
func (c *Conn) waitReadable() error { return c.takeReadable(true) }

// fd returns the connection's socket, if it has one.
func (c *Conn) fd() (int, bool) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}

// takeReadable takes what the socket has into c.pending; when it has
// nothing, it waits for it if wait is set, and returns errEmpty if not.
func (c *Conn) takeReadable(wait bool) error {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return errNoWait
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var bp *[]byte
	var n int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		// Try before waiting: the poller only wakes on new readiness, and
		// bytes may already be there.
		bp = c.pool.Get().(*[]byte)
		for {
			n, rerr = syscall.Read(int(fd), (*bp)[:cap(*bp)])
			if !errors.Is(rerr, syscall.EINTR) {
				break
			}
		}
		if errors.Is(rerr, syscall.EAGAIN) {
			c.pool.Put(bp)
			bp = nil
			if !wait {
				rerr = errEmpty
				return true
			}
			return false
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	if err == nil && n <= 0 {
		err = io.EOF
	}
	if err != nil {
		if bp != nil {
			c.pool.Put(bp)
		}
		return err
	}
	c.pendBuf, c.pending = bp, (*bp)[:n]
	return nil
}
