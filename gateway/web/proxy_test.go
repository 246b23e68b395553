package web_test

import (
	"testing"

	"github.com/tether-dev/tether/gateway/faultnet"
)

// proxy is faultnet's relay between the browser and a node: blackhole
// silences the open connections the way a lost mobile signal does (bytes
// stop flowing both ways, neither side is closed or told), and the relay
// counts WebSocket upgrades and notes who sent the first close frame on
// each.
type proxy struct{ *faultnet.Proxy }

func newProxy(t *testing.T, target string) proxy {
	t.Helper()
	p, err := faultnet.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return proxy{p}
}

func (p proxy) url(path string) string { return "http://" + p.Addr() + path }

// blackhole silences every connection open now; later ones flow.
func (p proxy) blackhole() { p.Blackhole(faultnet.Up) }

// setTarget sends new connections to another address (a restarted node).
func (p proxy) setTarget(addr string) { p.SetTarget(addr) }

// wsLinks are the connections that carried a WebSocket upgrade, oldest first.
func (p proxy) wsLinks() []*faultnet.Conn { return p.WebSockets() }

func (p proxy) wsCount() int { return len(p.WebSockets()) }
