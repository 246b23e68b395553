package client

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway/faultnet"
)

// newProxy puts a faultnet.Proxy (a failing network) in front of target.
func newProxy(t *testing.T, target string) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// quietFor waits until the server has sent the client nothing for d: the
// scenario "an idle connection, then the network dies".
func quietFor(t *testing.T, p *faultnet.Proxy, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		since := p.Quiet()
		if since >= d {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connection never went quiet for %v", d)
		}
		time.Sleep(min(d-since, 50*time.Millisecond))
	}
}

// waitMuted waits until what the proxy swallowed contains text.
func waitMuted(t *testing.T, p *faultnet.Proxy, text string) {
	t.Helper()
	timeout := time.After(wait)
	for !p.Swallowed(text) {
		select {
		case <-p.Notify():
		case <-timeout:
			t.Fatalf("the server never sent %q", text)
		}
	}
}

// countHandler is a slog.Handler that counts warnings and worse.
type countHandler struct{ n atomic.Int64 }

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }
func (h *countHandler) warnings() int64                    { return h.n.Load() }
