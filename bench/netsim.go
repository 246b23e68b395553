package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Sentinel errors of the simulated network and of the machine.
var (
	// ErrOutOfPorts: no local port left for a connection (EADDRNOTAVAIL).
	ErrOutOfPorts = errors.New("out of local ports (EADDRNOTAVAIL): lower --sessions or widen net.ipv4.ip_local_port_range")
	// ErrOutOfFiles: the open-file limit is reached (EMFILE/ENFILE).
	ErrOutOfFiles = errors.New("out of file descriptors (EMFILE/ENFILE): lower --sessions or raise the open-file limit (ulimit -n)")
)

// classifyDial maps a dial error onto the machine-limit sentinels.
func classifyDial(err error) error {
	switch {
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("%w: %w", ErrOutOfPorts, err)
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return fmt.Errorf("%w: %w", ErrOutOfFiles, err)
	}
	return err
}

// netSim is one simulated user's network: the client dials through it,
// and the harness cuts it (every connection closed abruptly: a TCP close
// with no WebSocket close frame), freezes it (every connection stops
// passing bytes, as when a phone loses signal) or restores it. While it
// is down, dials wait until it is restored or their context ends.
type netSim struct {
	dialer  func(ctx context.Context, network, addr string) (net.Conn, error)
	onError func(error) // a dial failed for a reason of its own

	mu    sync.Mutex
	up    chan struct{} // closed while the network is up
	conns map[*simConn]struct{}
	last  *simConn // the newest connection
}

// newNetSim makes a user's network; dial (nil: a plain net.Dialer)
// makes its real connections.
func newNetSim(dial func(ctx context.Context, network, addr string) (net.Conn, error), onError func(error)) *netSim {
	up := make(chan struct{})
	close(up)
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	return &netSim{up: up, conns: make(map[*simConn]struct{}), onError: onError, dialer: dial}
}

// dial is the client's websocket.Dialer.NetDialContext.
func (n *netSim) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	up := n.up
	n.mu.Unlock()
	select {
	case <-up:
	case <-ctx.Done():
		return nil, fmt.Errorf("simulated network down: %w", ctx.Err())
	}
	c, err := n.dialer(ctx, network, addr)
	if err != nil {
		err = classifyDial(err)
		if n.onError != nil && ctx.Err() == nil {
			n.onError(err)
		}
		return nil, err
	}
	sc := &simConn{Conn: c, closed: make(chan struct{}), frozen: make(chan struct{})}
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.up:
	default:
		_ = c.Close() // cut while dialing
		return nil, errors.New("simulated network went down while dialing")
	}
	n.conns[sc] = struct{}{}
	n.last = sc
	sc.owner = n
	return sc, nil
}

// lastConn is the newest connection, for its hello time.
func (n *netSim) lastConn() *simConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}

// down takes the network down; freeze chooses between freezing every
// connection and closing it.
func (n *netSim) down(freeze bool) {
	n.mu.Lock()
	select {
	case <-n.up:
		n.up = make(chan struct{})
	default:
	}
	conns := make([]*simConn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		if freeze {
			c.freeze()
		} else {
			_ = c.Close() // Close unregisters it
		}
	}
}

// restore brings the network back for new connections; frozen ones stay
// frozen until the client gives up on them.
func (n *netSim) restore() {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.up:
	default:
		close(n.up)
	}
}

func (n *netSim) forget(c *simConn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

// simConn is a connection the harness can freeze: once frozen, reads
// block until the connection is closed or their deadline passes, writes
// vanish, and what the peer sent meanwhile is lost.
type simConn struct {
	net.Conn
	owner *netSim

	closeOnce, freezeOnce sync.Once
	closed, frozen        chan struct{}
	readDL, writeDL       atomic.Int64 // deadlines, UnixNano, 0: none
	readSeen              atomic.Bool
	helloAt               atomic.Int64 // UnixNano of the first write after the first read
}

func (c *simConn) freeze() { c.freezeOnce.Do(func() { close(c.frozen) }) }

func (c *simConn) isFrozen() bool {
	select {
	case <-c.frozen:
		return true
	default:
		return false
	}
}

// stall blocks a frozen read until close or deadline.
func (c *simConn) stall(deadline int64) error {
	var timeout <-chan time.Time
	if deadline != 0 {
		t := time.NewTimer(time.Until(time.Unix(0, deadline)))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-c.closed:
		return net.ErrClosed
	case <-timeout:
		return os.ErrDeadlineExceeded
	}
}

func (c *simConn) Read(p []byte) (int, error) {
	if c.isFrozen() {
		return 0, c.stall(c.readDL.Load())
	}
	n, err := c.Conn.Read(p)
	if c.isFrozen() { // what came in after the freeze is lost
		return 0, c.stall(c.readDL.Load())
	}
	if n > 0 {
		c.readSeen.Store(true)
	}
	return n, err
}

func (c *simConn) Write(p []byte) (int, error) {
	if c.isFrozen() {
		// As on a real silent network: the bytes go into the socket's
		// buffer and never arrive.
		return len(p), nil
	}
	// The client writes the upgrade request, reads the response, then
	// writes the hello: that write starts the resume latency.
	if c.readSeen.Load() && c.helloAt.Load() == 0 {
		c.helloAt.Store(time.Now().UnixNano())
	}
	return c.Conn.Write(p)
}

func (c *simConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		err = c.Conn.Close()
		if c.owner != nil {
			c.owner.forget(c)
		}
	})
	return err
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (c *simConn) SetDeadline(t time.Time) error {
	c.readDL.Store(unixNano(t))
	c.writeDL.Store(unixNano(t))
	return c.Conn.SetDeadline(t)
}

func (c *simConn) SetReadDeadline(t time.Time) error {
	c.readDL.Store(unixNano(t))
	return c.Conn.SetReadDeadline(t)
}

func (c *simConn) SetWriteDeadline(t time.Time) error {
	c.writeDL.Store(unixNano(t))
	return c.Conn.SetWriteDeadline(t)
}
