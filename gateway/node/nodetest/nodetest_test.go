package nodetest_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway"
	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/gateway/wstest"
)

// The kit's cleanup must leave no goroutine of the node behind, or every
// package using it would fail its own goleak check.
func TestMain(m *testing.M) { goleak.VerifyTestMain(removingBinary{m}) }

// removingBinary runs the tests and then removes the binary they built,
// as a TestMain that uses Binary must.
type removingBinary struct{ *testing.M }

func (r removingBinary) Run() int {
	defer nodetest.RemoveBinary()
	return r.M.Run()
}

// get is GET url with an optional bearer token; it returns the status.
func get(t *testing.T, url, tok string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	hc := &http.Client{Timeout: actortest.Patience, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// newSession says hello on n as tok and returns the new session's id.
func newSession(t *testing.T, n *nodetest.Node, tok string) string {
	t.Helper()
	c, err := wstest.Dial(t, n.URL)
	if err != nil {
		t.Fatal(err)
	}
	f := c.Hello(tok, "", 0, actortest.Patience)
	if f.Type != "session" || f.SessionID == "" {
		t.Fatalf("hello with nodetest.Token: %s", f.Raw)
	}
	return f.SessionID
}

// The zero Options give a ready node that accepts the kit's tokens, and
// refuses its expired ones and those of another secret.
func TestStartZeroOptions(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	if n.Clock != nil {
		t.Error("a node without ManualClock has a manual clock")
	}
	if code := get(t, n.HTTP+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("/readyz: %d", code)
	}
	tok := nodetest.Token(t, "alice")
	url := n.HTTP + "/v1/sessions/" + newSession(t, n, tok)
	other, err := gateway.Issue([]byte("another secret"), gateway.TokenSpec{User: "alice"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		tok  string
		want int
	}{
		"Token":          {tok, http.StatusOK},
		"Issue":          {nodetest.Issue(t, gateway.TokenSpec{User: "alice", TTL: 24 * time.Hour}), http.StatusOK},
		"ExpiredToken":   {nodetest.ExpiredToken(t, "alice"), http.StatusUnauthorized},
		"another secret": {other, http.StatusUnauthorized},
	} {
		if code := get(t, url, c.tok); code != c.want {
			t.Errorf("%s: status %d, want %d", name, code, c.want)
		}
	}
}

// A node closed by its test restarts on its Dir with its sessions, and
// ManualClock hands the test the registry's clock.
func TestRestartOnDir(t *testing.T) {
	n1 := nodetest.Start(t, nodetest.Options{ManualClock: true})
	if n1.Clock == nil || n1.Registry == nil || n1.Log == nil {
		t.Fatalf("node %+v: Clock, Registry and Log must be set", n1)
	}
	tok := nodetest.Token(t, "alice")
	sid := newSession(t, n1, tok)
	if err := n1.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	n2 := nodetest.Start(t, nodetest.Options{Dir: n1.Dir})
	if n2.Dir != n1.Dir || n2.ID != n1.ID {
		t.Fatalf("restarted node: dir %s id %s, want %s %s", n2.Dir, n2.ID, n1.Dir, n1.ID)
	}
	if code := get(t, n2.HTTP+"/v1/sessions/"+sid, tok); code != http.StatusOK {
		t.Fatalf("session %s after the restart: status %d", sid, code)
	}
}
