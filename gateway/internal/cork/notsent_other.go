//go:build !linux

package cork

import "net"

// setNotSentLimit does nothing here: the option is Linux's, and a slow
// reader's socket may fill before its close frame is written.
func setNotSentLimit(net.Conn, int) error { return errNoSocket }
