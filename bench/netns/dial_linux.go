package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// in runs fn on an OS thread that joined node i's namespace, so the
// sockets fn opens live there (a socket keeps its namespace for good).
// The thread is never handed back: the goroutine exits still locked,
// which makes the runtime end the thread rather than reuse it in the
// wrong namespace.
func (l *Lab) in(i int, fn func() error) error {
	if i < 0 || i >= len(l.nodes) {
		return fmt.Errorf("netns: no node %d", i)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(runDir + "/" + l.nodes[i])
		if err != nil {
			done <- fmt.Errorf("netns: node %d: %w", i, err)
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		_ = f.Close()
		if err != nil {
			done <- fmt.Errorf("netns: enter node %d: %w", i, err)
			return
		}
		done <- fn()
	}()
	return <-done // fn takes ctx, so this wait ends with it
}

// DialContext connects from inside node i's namespace (a client on that
// node's side of any cut).
func (l *Lab) DialContext(ctx context.Context, i int, network, address string) (net.Conn, error) {
	var c net.Conn
	err := l.in(i, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Listen listens inside node i's namespace.
func (l *Lab) Listen(ctx context.Context, i int, network, address string) (net.Listener, error) {
	var ln net.Listener
	err := l.in(i, func() error {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ln, nil
}

// ListenPacket opens a datagram socket inside node i's namespace.
func (l *Lab) ListenPacket(ctx context.Context, i int, network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := l.in(i, func() error {
		var err error
		pc, err = (&net.ListenConfig{}).ListenPacket(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, err
	}
	return pc, nil
}
