package httpagent

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/wal"
)

// status500 answers 500 to every request and counts them.
func status500(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func newAgent(t *testing.T, url string) *Agent {
	t.Helper()
	a, err := New(Config{URL: url, Secret: []byte("s"), Timeout: 2 * time.Second, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = a.Close() })
	return a
}

// A 5xx is retried for an idempotent call, not for one that may have run.
func TestToolRetryOnlyWhenIdempotent(t *testing.T) {
	for _, idem := range []bool{false, true} {
		srv, n := status500(t)
		a := newAgent(t, srv.URL)
		_, err := a.RunCall(t.Context(), engine.CallInput{SessionID: "s", CallID: "call-2", Name: "x", Idempotent: idem}, func(string) {})
		if err == nil || !strings.HasPrefix(err.Error(), toolFailure) || !errors.Is(err, ErrStatus) {
			t.Fatalf("idempotent=%v: %v", idem, err)
		}
		if got := n.Load(); idem && got < 2 || !idem && got != 1 {
			t.Fatalf("idempotent=%v: %d requests", idem, got)
		}
	}
}

// A retry cut short by the timeout mid-request still says why the
// attempts before it failed.
func TestTimeoutKeepsTheLastFailure(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		// The second attempt outlives the timeout. The body is read first:
		// only then does the server watch for the client going away.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	a, err := New(Config{URL: srv.URL, Secret: []byte("s"), Timeout: 300 * time.Millisecond, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	_, err = a.RunCall(t.Context(), engine.CallInput{SessionID: "s", CallID: "c", Name: "x", Idempotent: true}, func(string) {})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrStatus) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("after %d requests: %v", n.Load(), err)
	}
}

// A tool request that failed ends the turn at the next step, without a
// step request.
func TestFailedToolRequestEndsTurn(t *testing.T) {
	srv, n := status500(t)
	a := newAgent(t, srv.URL)
	failed := wal.Entry{Seq: 3, Role: engine.RoleTool, Content: toolFailure + "tool request: HTTP 400",
		Metadata: map[string]any{"status": engine.ToolFailed, "name": "lookup"}}
	_, err := a.Next(t.Context(), engine.TurnInput{SessionID: "s", User: wal.Entry{Seq: 1}, Steps: []wal.Entry{failed}})
	if err == nil || !strings.Contains(err.Error(), "tool request for lookup") || n.Load() != 0 {
		t.Fatalf("err %v after %d requests", err, n.Load())
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": 0, "3": 3 * time.Second, "soon": 0, "-1": 0,
		now.Add(7 * time.Second).Format(http.TimeFormat): 7 * time.Second,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}
}

func TestReadLines(t *testing.T) {
	ok := func(l line) (bool, error) { return l.Type == "reply", nil }
	for in, want := range map[string]error{
		"{\"type\":\"text\",\"text\":\"a\"}\n\n{\"type\":\"reply\"}": nil,
		"{\"type\":\"text\",\"text\":\"a\"}\n":                       ErrNoFinal,
		"{\"type\":\"text\",\"te":                                    ErrNoFinal,
		"nope\n{\"type\":\"reply\"}\n":                               ErrBadLine,
		strings.Repeat("x", 200) + "\n":                              ErrBadLine,
	} {
		if err := readLines(strings.NewReader(in), 100, ok); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("%.30q: %v, want %v", in, err, want)
		}
	}
}

func TestNewChecksConfig(t *testing.T) {
	if _, err := New(Config{URL: "127.0.0.1:9", Secret: []byte("s")}); err == nil {
		t.Error("a URL without a scheme was taken")
	}
	if _, err := New(Config{URL: "http://127.0.0.1:9/agent"}); err == nil {
		t.Error("no secret was taken")
	}
}
