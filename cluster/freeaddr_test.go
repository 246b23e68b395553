package cluster

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeLocalAddr: the address is on 127.0.0.1, below the ports given to
// outgoing connections, and free for TCP and UDP.
func TestFreeLocalAddr(t *testing.T) {
	for _, udp := range []bool{false, true} {
		addr, err := FreeLocalAddr(udp)
		if err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(addr)
		if p, _ := strconv.Atoi(port); host != "127.0.0.1" || p < 1024 || p >= 32768 {
			t.Fatalf("FreeLocalAddr(%v) = %s", udp, addr)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s not free for TCP: %v", addr, err)
		}
		ln.Close()
		if udp {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				t.Fatalf("%s not free for UDP: %v", addr, err)
			}
			pc.Close()
		}
	}
}
