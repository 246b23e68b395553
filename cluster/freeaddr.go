package cluster

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
)

// FreeLocalAddr returns a 127.0.0.1 address whose port is free right now
// for TCP (and for UDP too when udp is set, as gossip needs), for tests and
// for local clusters (tether bench --local) that must know a node's
// addresses before it starts, or keep them across its restarts.
//
// The port is picked at random below 32768, outside the range Linux (and
// other systems) hand to outgoing connections: a port taken from there
// with ":0" and released could be given to some connection before the
// node binds it again, which made a node fail to start now and then when
// many tests ran at once.
func FreeLocalAddr(udp bool) (string, error) {
	const lo, hi = 20000, 32000
	for range 200 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if udp {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				_ = ln.Close()
				continue
			}
			_ = pc.Close()
		}
		_ = ln.Close()
		return addr, nil
	}
	return "", errors.New("cluster: no free port on 127.0.0.1 below 32000")
}
