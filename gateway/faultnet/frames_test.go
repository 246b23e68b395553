package faultnet

import (
	"bytes"
	"testing"
)

// The scanner finds a close frame after the HTTP head and other frames,
// however the bytes are split: masked or not, with each length encoding.
func TestFrameScannerFindsClose(t *testing.T) {
	frame := func(op byte, masked bool, n int) []byte {
		b := []byte{0x80 | op}
		m := byte(0)
		if masked {
			m = 0x80
		}
		switch {
		case n < 126:
			b = append(b, m|byte(n))
		case n <= 0xffff:
			b = append(b, m|126, byte(n>>8), byte(n))
		default:
			b = append(b, m|127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		}
		if masked {
			b = append(b, 1, 2, 3, 4)
		}
		return append(b, bytes.Repeat([]byte{0x88}, n)...) // payload bytes that look like close opcodes
	}
	for _, masked := range []bool{false, true} {
		stream := []byte("GET /v1/ws HTTP/1.1\r\nHost: x\r\n\r\n")
		for _, n := range []int{5, 200, 70000} {
			stream = append(stream, frame(0x1, masked, n)...)
		}
		closeAt := len(stream)
		stream = append(stream, frame(0x8, masked, 2)...)
		for _, chunk := range []int{1, 7, 4096, len(stream)} {
			var f frameScanner
			sawAt := -1
			for i := 0; i < len(stream); i += chunk {
				end := min(i+chunk, len(stream))
				if f.feed(stream[i:end]) && sawAt < 0 {
					sawAt = end
				}
			}
			if sawAt <= closeAt || sawAt > min(closeAt+chunk+6, len(stream)) {
				t.Fatalf("masked=%v chunks of %d: close seen at byte %d, the frame starts at %d", masked, chunk, sawAt, closeAt)
			}
		}
	}
}
