//go:build linux

package cork

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// setNotSentLimit sets TCP_NOTSENT_LOWAT on c's socket; 0 lifts it (the
// system's default, unlimited).
func setNotSentLimit(c net.Conn, n int) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errNoSocket
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	}); err != nil {
		return err
	}
	return serr
}
