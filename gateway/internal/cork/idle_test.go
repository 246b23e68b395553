package cork

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// wsFrame builds a masked client frame (the mask is all zero bytes, so
// the payload goes as is).
func wsFrame(fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var h []byte
	switch n := len(payload); {
	case n <= 125:
		h = []byte{b0, 0x80 | byte(n)}
	case n <= 0xffff:
		h = []byte{b0, 0x80 | 126, 0, 0}
		binary.BigEndian.PutUint16(h[2:], uint16(n))
	default:
		h = make([]byte, 10)
		h[0], h[1] = b0, 0x80|127
		binary.BigEndian.PutUint64(h[2:], uint64(n))
	}
	h = append(h, 0, 0, 0, 0)
	return append(h, payload...)
}

// TestFrameTracker feeds a stream of frames, cut into reads of many
// sizes, and checks after every frame what the tracker concludes: a
// message is counted when its final frame is whole, and the stream is
// clean only when it ends with one.
func TestFrameTracker(t *testing.T) {
	type step struct {
		frame    []byte
		messages uint64
		clean    bool
	}
	steps := []step{
		{wsFrame(true, 1, []byte("hello")), 1, true},
		{wsFrame(true, 1, bytes.Repeat([]byte("x"), 300)), 2, true},   // 16-bit length
		{wsFrame(true, 2, bytes.Repeat([]byte("y"), 70000)), 3, true}, // 64-bit length
		{wsFrame(false, 1, []byte("part one ")), 3, false},            // a fragment
		{wsFrame(true, 9, []byte("ping")), 3, false},                  // a control frame between fragments
		{wsFrame(true, 0, []byte("part two")), 4, true},               // the final continuation
		{wsFrame(true, 1, nil), 5, true},                              // empty message
		{wsFrame(true, 0xa, []byte("pong")), 5, false},                // a control frame after: not clean
		{wsFrame(true, 1, []byte("{}")), 6, true},
	}
	for _, size := range []int{1, 2, 3, 5, 13, 64, 1000, 1 << 20} {
		t.Run(fmt.Sprint("reads of ", size), func(t *testing.T) {
			var tr frameTracker
			tr.feed([]byte("GET /v1/ws HTTP/1.1\r\n\r\n")) // before the upgrade: ignored
			tr.start()
			if !tr.drained(0) {
				t.Fatal("a fresh connection is not drained")
			}
			for i, s := range steps {
				for p := s.frame; len(p) > 0; {
					n := min(size, len(p))
					tr.feed(p[:n])
					p = p[n:]
					if len(p) > 0 && tr.clean {
						t.Fatalf("step %d: clean with %d bytes of the frame to come", i, len(p))
					}
				}
				if tr.messages != s.messages || tr.clean != s.clean {
					t.Fatalf("step %d: messages %d clean %v, want %d %v", i, tr.messages, tr.clean, s.messages, s.clean)
				}
				if tr.drained(s.messages - 1) {
					t.Fatalf("step %d: drained although a message is not taken", i)
				}
			}
		})
	}
}

func TestLonePong(t *testing.T) {
	pong := wsFrame(true, 0xa, []byte("abc"))
	if n, ok := lonePong(pong); !ok || n != len(pong) {
		t.Fatalf("whole pong: %d %v", n, ok)
	}
	if n, ok := lonePong(append(pong, wsFrame(true, 1, []byte("{}"))...)); !ok || n != len(pong) {
		t.Fatalf("pong then a message: %d %v", n, ok)
	}
	for name, p := range map[string][]byte{
		"partial":  pong[:len(pong)-1],
		"ping":     wsFrame(true, 9, nil),
		"text":     wsFrame(true, 1, []byte("{}")),
		"unmasked": {0x8a, 0x00},
		"empty":    nil,
	} {
		if _, ok := lonePong(p); ok {
			t.Errorf("%s: taken for a whole pong", name)
		}
	}
}
