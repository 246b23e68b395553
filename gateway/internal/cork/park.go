package cork

import (
	"errors"
	"time"
)

// Parking (park.go, poller_linux.go). WaitIdle still costs a goroutine
// per idle connection: 2-4 KiB of stack while the client is quiet, most
// of what an idle connection holds. A parked connection costs none: its
// socket waits in the Poller's epoll set, and when it becomes readable
// (or the connection is closed, or a read deadline is set: something
// needs its reader) the Poller calls the wake function given to Park,
// exactly once, on the Poller's goroutine. The woken reader takes what
// came with Ready and parks again if it was nothing for gorilla (a lone
// pong, a spurious wake).
//
// Invariant: Park is called only by the connection's reader, only when
// WaitIdle would wait (gorilla holds nothing unread); after the wake the
// reader is the only one to touch the connection's reading side again.
// Once Close or SetReadDeadline (with a deadline) was called the
// connection never parks again: its reader waits with the deadline the
// runtime enforces.

// parking is where a parked connection is in its Poller.
type parking struct {
	id uint64
	fd int
}

// Park hands the wait for the client's next bytes to the Poller and
// reports whether it did; wake is called once when they come (or the
// connection needs its reader). It does not park a connection that is
// not idle (taken: Idle's argument), has no poller or no socket, or is
// closing.
func (c *Conn) Park(taken uint64, wake func()) bool {
	if c.poller == nil || c.sock < 0 || c.noPark.Load() || !c.Idle(taken) {
		return false
	}
	c.wake = wake
	if !c.poller.add(c, c.sock) {
		c.wake = nil
		return false
	}
	// Close or SetReadDeadline may have run between the check and the add,
	// finding nothing to unpark: unpark now.
	if c.noPark.Load() {
		c.unpark()
	}
	return true
}

// unpark wakes the reader of a parked connection, unless the Poller
// already did.
func (c *Conn) unpark() {
	if c.poller != nil && c.poller.remove(c) {
		c.fire()
	}
}

// fire calls the wake function; only whoever took c out of the Poller's
// set calls it.
func (c *Conn) fire() {
	w := c.wake
	c.wake = nil
	if w != nil {
		w()
	}
}

// Ready is the woken reader's first call: it takes what the socket has
// and reports whether gorilla has something to read (or an error to
// meet, or the connection is closing). False: nothing came but a pong;
// park again.
func (c *Conn) Ready(taken uint64) bool {
	if !c.Idle(taken) || c.noPark.Load() {
		return true
	}
	for {
		err := c.takeReadable(false)
		if errors.Is(err, errEmpty) {
			return false
		}
		if err != nil {
			return true // gorilla's read meets it
		}
		for len(c.pending) > 0 {
			n, ok := lonePong(c.pending)
			if !ok {
				return true
			}
			c.consume(n)
			if c.alive != nil {
				c.alive()
			}
		}
	}
}

// Close closes the socket, waking its reader first if it is parked.
func (c *Conn) Close() error {
	c.noPark.Store(true)
	c.unpark()
	return c.Conn.Close()
}

// SetReadDeadline sets the socket's read deadline; a parked reader is
// woken to wait with it. Clearing the deadline (as net/http and gorilla
// do around the upgrade) changes nothing about parking.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		return c.Conn.SetReadDeadline(t)
	}
	c.noPark.Store(true)
	err := c.Conn.SetReadDeadline(t)
	c.unpark()
	return err
}

// SetDeadline is SetReadDeadline and SetWriteDeadline.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}
