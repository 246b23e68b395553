//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package cork

import "errors"

// waitReadable is not available here: the read loop waits inside gorilla.
func (c *Conn) waitReadable() error {
	return errors.New("gateway: waiting for a readable socket is not supported on this platform")
}
