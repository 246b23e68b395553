package cluster

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

type frameType uint8

const (
	frameCall   frameType = 1 + iota // ID, M method, B request, D ms the caller waits
	frameReply                       // ID, B response | E message, C code
	frameCancel                      // ID: the caller gave up
	frameOpen                        // ID, M method, B first message
	frameData                        // ID, B value
	frameFin                         // ID: the sender closed the stream
	frameReset                       // ID, E reason, C code
)

// frame is the unit on the wire: a msgpack array of frameFields values.
// WebSocket messages carry one or more frames back to back.
type frame struct {
	T  frameType
	ID uint64
	M  string
	B  msgpack.RawMessage
	E  string
	C  string
	D  int64
}

// frameFields is the array length this version writes; a reader skips any
// extra fields a newer peer sends.
const frameFields = 7

func (f *frame) encode(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(frameFields); err != nil {
		return err
	}
	_ = e.EncodeUint(uint64(f.T))
	_ = e.EncodeUint(f.ID)
	_ = e.EncodeString(f.M)
	if len(f.B) == 0 {
		_ = e.EncodeNil()
	} else {
		_ = f.B.EncodeMsgpack(e)
	}
	_ = e.EncodeString(f.E)
	_ = e.EncodeString(f.C)
	return e.EncodeInt(f.D) // the writer is a bytes.Buffer: only the last error can matter
}

// decode reads one frame; io.EOF at the end of a message.
func (f *frame) decode(d *msgpack.Decoder) error {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n < frameFields {
		return fmt.Errorf("frame of %d fields", n)
	}
	t, err := d.DecodeUint8()
	if err == nil {
		f.T = frameType(t)
		f.ID, err = d.DecodeUint64()
	}
	if err == nil {
		f.M, err = d.DecodeString()
	}
	if err == nil {
		f.B, err = d.DecodeRaw()
	}
	if err == nil {
		f.E, err = d.DecodeString()
	}
	if err == nil {
		f.C, err = d.DecodeString()
	}
	if err == nil {
		f.D, err = d.DecodeInt64()
	}
	for i := frameFields; i < n && err == nil; i++ {
		err = d.Skip()
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// Stream is a bidirectional, ordered flow of msgpack values between two
// nodes, multiplexed on a link connection. Send and Recv may be called from
// different goroutines.
type Stream struct {
	c      *conn
	id     uint64
	method Op
	in     chan msgpack.RawMessage
	done   chan struct{}
	once   sync.Once
	err    error // set before done is closed
}

func newStream(c *conn, id uint64, method Op) *Stream {
	return &Stream{
		c: c, id: id, method: method,
		in:   make(chan msgpack.RawMessage, c.l.cfg.StreamBuffer),
		done: make(chan struct{}),
	}
}

// Method is the method the stream was opened with.
func (s *Stream) Method() Op { return s.method }

// Peer is the node id at the other end.
func (s *Stream) Peer() string { return s.c.peer }

// Done is closed when the stream has ended: closed by either side, reset,
// overflowed or its connection lost. Values already received can still be
// read with Recv after a clean close by the peer.
func (s *Stream) Done() <-chan struct{} { return s.done }

// push is the reader handing over a value; false if the buffer is full.
func (s *Stream) push(b msgpack.RawMessage) bool {
	select {
	case s.in <- b:
		return true
	default:
		return false
	}
}

// end ends the stream with err, once.
func (s *Stream) end(err error) bool {
	first := false
	s.once.Do(func() {
		s.err = err
		close(s.done)
		first = true
	})
	return first
}

// Send queues v for the peer, waiting with ctx while the connection's queue
// is full. After the stream ended it returns io.EOF if the peer closed it,
// else why it ended (ErrClosed, ErrReset, ErrOverflow, ErrLinkDown).
func (s *Stream) Send(ctx context.Context, v any) error {
	select {
	case <-s.done:
		return s.err
	default:
	}
	b, err := s.c.l.encode(v)
	if err != nil {
		return fmt.Errorf("cluster: stream %s: %w", s.method, err)
	}
	f := frame{T: frameData, ID: s.id, B: b}
	select {
	case s.c.out <- f:
		return nil
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Recv returns the next value. It returns io.EOF once the peer closed the
// stream and every value it sent was read; ErrClosed after Close; ErrReset,
// ErrOverflow or ErrLinkDown (wrapped) when the stream broke, dropping any
// values not yet read.
func (s *Stream) Recv(ctx context.Context) (msgpack.RawMessage, error) {
	for {
		select {
		case <-s.done:
			if s.err != io.EOF {
				return nil, s.err
			}
			select {
			case b := <-s.in:
				return b, nil
			default:
				return nil, io.EOF
			}
		default:
		}
		select {
		case b := <-s.in:
			return b, nil
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close ends the stream on this side and tells the peer, whose Recv then
// returns io.EOF after the values sent before Close. It never blocks. Safe
// to call twice, and after the stream ended otherwise.
func (s *Stream) Close() error {
	if !s.end(ErrClosed) || s.c.removeStream(s.id) == nil {
		return nil // ended already (or the connection is gone)
	}
	fin := frame{T: frameFin, ID: s.id}
	select {
	case s.c.out <- fin: // behind every value sent before
	default:
		s.c.l.goSafe(func() { _ = s.c.send(s.c.l.ctx, fin) })
	}
	return nil
}
