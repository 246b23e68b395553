//go:build !linux

package cork

import "errors"

// Poller parks idle connections on Linux only; elsewhere every idle
// connection's reader waits in WaitIdle.
type Poller struct{}

// NewPoller fails here: there is no epoll.
func NewPoller() (*Poller, error) {
	return nil, errors.New("cork: parking idle connections needs Linux")
}

// Close does nothing.
func (p *Poller) Close() error { return nil }

// Parked returns 0.
func (p *Poller) Parked() int { return 0 }

func (p *Poller) add(*Conn, int) bool { return false }
func (p *Poller) remove(*Conn) bool   { return false }
