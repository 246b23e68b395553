package cork

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// Poller waits, on one goroutine, for any of many parked connections to
// become readable (park.go): a connection parked here costs no goroutine
// and no stack while its client is quiet. It is an epoll set of its own,
// beside the runtime's: each parked socket is added once, level
// triggered, and removed when it fires or is unparked.
//
// The set is itself waited on through the runtime's poller (an epoll set
// is readable while any of its sockets is), never in a blocking
// epoll_wait: a goroutine blocked in a system call keeps its P until the
// runtime's monitor takes it back, and the reader the poller had just
// woken waited on that P, tens of microseconds a wake on two cores.
type Poller struct {
	epfd int
	ep   *os.File // epfd, as the runtime's poller waits on it
	wake [2]int   // a pipe: Close writes to it to end the wait

	mu     sync.Mutex
	next   uint64
	parked map[uint64]*Conn
	closed bool
	done   chan struct{}
}

// NewPoller starts the poller's goroutine; Close stops it.
func NewPoller() (*Poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("cork: epoll: %w", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("cork: epoll: %w", err)
	}
	p := &Poller{epfd: epfd, ep: os.NewFile(uintptr(epfd), "cork-epoll"), parked: make(map[uint64]*Conn), done: make(chan struct{})}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		p.ep.Close()
		return nil, fmt.Errorf("cork: pipe: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
	ev.Fd, ev.Pad = 0, 0 // token 0: the pipe
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
		p.closeFDs()
		return nil, fmt.Errorf("cork: epoll add: %w", err)
	}
	go p.loop()
	return p, nil
}

func (p *Poller) closeFDs() {
	syscall.Close(p.wake[0])
	syscall.Close(p.wake[1])
	p.ep.Close()
}

// Close wakes every parked connection and stops the poller. Safe twice.
func (p *Poller) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return nil
	}
	p.closed = true
	parked := p.parked
	p.parked = nil
	p.mu.Unlock()
	_, _ = syscall.Write(p.wake[1], []byte{1})
	<-p.done
	p.closeFDs()
	for _, c := range parked {
		c.fire()
	}
	return nil
}

// Parked returns how many connections are parked.
func (p *Poller) Parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// add parks c, whose socket is fd, and reports whether it could.
func (p *Poller) add(c *Conn, fd int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.next++
	id := p.next
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP}
	ev.Fd, ev.Pad = int32(uint32(id)), int32(uint32(id>>32))
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return false
	}
	p.parked[id] = c
	c.park = parking{id: id, fd: fd}
	return true
}

// remove takes c out of the set, if it is still there, and reports
// whether it was: whoever removes it fires it.
func (p *Poller) remove(c *Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := c.park.id
	if p.parked[id] != c {
		return false
	}
	delete(p.parked, id)
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, c.park.fd, nil)
	return true
}

func (p *Poller) loop() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 128)
	rc, err := p.ep.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var werr error
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, werr = syscall.EpollWait(int(fd), events, 0)
				if !errors.Is(werr, syscall.EINTR) {
					return werr != nil || n > 0 // else wait until the set is readable
				}
			}
		})
		if err != nil || werr != nil {
			return
		}
		var ready []*Conn
		p.mu.Lock()
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				p.mu.Unlock()
				return // Close
			}
			if c := p.parked[id]; c != nil {
				delete(p.parked, id)
				_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, c.park.fd, nil)
				ready = append(ready, c)
			}
		}
		p.mu.Unlock()
		for _, c := range ready {
			c.fire()
		}
		clear(ready)
	}
}
