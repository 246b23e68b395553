//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package cork

import "errors"

var errNoWait = errors.New("cork: waiting for a readable socket is not supported on this platform")

// errEmpty: takeReadable found nothing to take.
var errEmpty = errors.New("cork: nothing to read")

// waitReadable is not available here: the read loop waits inside gorilla.
func (c *Conn) waitReadable() error { return errNoWait }

func (c *Conn) takeReadable(bool) error { return errNoWait }

func (c *Conn) fd() (int, bool) { return 0, false }
