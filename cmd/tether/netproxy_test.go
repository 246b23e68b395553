package main

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway/faultnet"
)

// newNetProxy puts a faultnet.Proxy (a failing network) in front of a
// node's address.
func newNetProxy(t *testing.T, target string) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// quietFor waits until the server has sent the client nothing for d.
func quietFor(t *testing.T, p *faultnet.Proxy, d time.Duration) {
	t.Helper()
	poll(t, 20*time.Second, "a quiet connection", func() bool { return p.Quiet() >= d })
}
