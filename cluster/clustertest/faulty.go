package clustertest

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// FaultyTransport wraps a memberlist transport so tests can cut gossip:
// Block(addr) drops every packet to and from the gossip address addr and
// refuses dials to it; Isolate cuts this node off from everyone; Heal
// undoes both. Pass it as cluster.Config.Transport.
//
// A stream accepted from another node cannot be told apart by address (its
// source port is ephemeral), so Block does not refuse incoming streams: to
// cut two nodes apart, each must Block the other. Isolate does refuse them.
type FaultyTransport struct {
	inner    memberlist.NodeAwareTransport
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	draining chan struct{} // shutting down: drop what nobody reads
	stop     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once

	mu       sync.Mutex
	blocked  map[string]bool
	isolated bool
}

var _ memberlist.NodeAwareTransport = (*FaultyTransport)(nil)

// NewFaultyTransport wraps inner; the FaultyTransport owns it (Shutdown
// shuts it down).
func NewFaultyTransport(inner memberlist.NodeAwareTransport) *FaultyTransport {
	t := &FaultyTransport{
		inner:    inner,
		packetCh: make(chan *memberlist.Packet),
		streamCh: make(chan net.Conn),
		draining: make(chan struct{}),
		stop:     make(chan struct{}),
		blocked:  make(map[string]bool),
	}
	t.wg.Add(2)
	go t.forwardPackets()
	go t.forwardStreams()
	return t
}

// Block drops all gossip to and from addr (host:port, as Membership.Addr).
func (t *FaultyTransport) Block(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.blocked[addr] = true
}

// Isolate drops all gossip to and from every node.
func (t *FaultyTransport) Isolate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.isolated = true
}

// Heal lets all gossip through again.
func (t *FaultyTransport) Heal() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.blocked)
	t.isolated = false
}

func (t *FaultyTransport) cut(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.isolated || t.blocked[addr]
}

func (t *FaultyTransport) forwardPackets() {
	defer t.wg.Done()
	for {
		select {
		case <-t.stop:
			return
		case p := <-t.inner.PacketCh():
			if t.cut(p.From.String()) {
				continue
			}
			select {
			case t.packetCh <- p:
			case <-t.draining:
			}
		}
	}
}

func (t *FaultyTransport) forwardStreams() {
	defer t.wg.Done()
	for {
		select {
		case <-t.stop:
			return
		case c := <-t.inner.StreamCh():
			if t.cut("") {
				_ = c.Close()
				continue
			}
			select {
			case t.streamCh <- c:
			case <-t.draining:
				_ = c.Close()
			}
		}
	}
}

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *FaultyTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

// WriteTo implements memberlist.Transport; a cut packet is dropped silently,
// as the network would.
func (t *FaultyTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.cut(addr) {
		return time.Now(), nil
	}
	return t.inner.WriteTo(b, addr)
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *FaultyTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.cut(a.Addr) {
		return time.Now(), nil
	}
	return t.inner.WriteToAddress(b, a)
}

// PacketCh implements memberlist.Transport.
func (t *FaultyTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport.
func (t *FaultyTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *FaultyTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.cut(a.Addr) {
		return nil, fmt.Errorf("dial %s: cut by FaultyTransport", a.Addr)
	}
	return t.inner.DialAddressTimeout(a, timeout)
}

// StreamCh implements memberlist.Transport.
func (t *FaultyTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown implements memberlist.Transport. Safe twice. The forwarders
// keep draining the inner transport until it is down: its listeners block
// handing over a packet nobody takes.
func (t *FaultyTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.draining)
		err = t.inner.Shutdown()
		close(t.stop)
		t.wg.Wait()
	})
	return err
}
