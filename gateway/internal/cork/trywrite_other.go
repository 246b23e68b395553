//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package cork

// TryWrite writes nothing here: the writer writes p.
func (c *Conn) TryWrite(p []byte) (bool, error) { return false, nil }
