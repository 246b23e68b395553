//go:build !linux

package netns

import (
	"context"
	"fmt"
	"net"
)

func (l *Lab) in(int, func() error) error {
	return fmt.Errorf("%w: not Linux", ErrUnsupported)
}

// DialContext connects from inside node i's namespace (Linux only).
func (l *Lab) DialContext(context.Context, int, string, string) (net.Conn, error) {
	return nil, l.in(0, nil)
}

// Listen listens inside node i's namespace (Linux only).
func (l *Lab) Listen(context.Context, int, string, string) (net.Listener, error) {
	return nil, l.in(0, nil)
}

// ListenPacket opens a datagram socket inside node i's namespace (Linux only).
func (l *Lab) ListenPacket(context.Context, int, string, string) (net.PacketConn, error) {
	return nil, l.in(0, nil)
}
