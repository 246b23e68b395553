package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A short run against one real local node, with drops, silences, stays
// beyond a short window and a SIGKILL: every session verified, zero
// violations, and the figures in the JSON report add up.
func TestLocalRunHasNoViolations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node for ~15s")
	}
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "report.html")
	var out, errOut bytes.Buffer
	b, err := New(Config{
		Local: 1, ServerBin: serverBin(t), DataDir: filepath.Join(dir, "nodes"),
		Sessions: 30, Ramp: 2 * time.Second, Duration: 10 * time.Second, Rate: 2,
		Window: 2 * time.Second, DropEvery: 3 * time.Second, AwayMax: time.Second, SilentFrac: 0.3, ExpireFrac: 0.3,
		AgentMix: 0.3, ToolDelay: 300 * time.Millisecond, KillEvery: 6 * time.Second, Down: 500 * time.Millisecond,
		MaxBackoff: 300 * time.Millisecond, Drain: 20 * time.Second,
		JSONPath: jsonPath, HTMLPath: htmlPath, Out: &out, Err: &errOut,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := b.Run(ctx)
	if cerr := b.Close(); cerr != nil {
		t.Errorf("close: %v", cerr)
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	t.Logf("summary:\n%s", out.String())
	if !rep.Passed {
		t.Fatalf("violations:\n%s\n%s", out.String(), errOut.String())
	}

	// The figures, as a script would read them.
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	c := r.Counts
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s; counts %+v", what, c)
		}
	}
	check("schema and verdict", r.Schema == SchemaVersion && r.Passed && c.Violations == 0 && r.Violations.Total == 0)
	check("every user ran", c.Users == 30 && c.Sessions >= 30)
	check("messages were acked and each ack found in its log", c.AckedSends > 100 && c.AcksVerified+c.UncheckedAcks == c.AckedSends)
	check("every session not expired was read back", c.SessionsVerified+c.SessionsExpired == int(c.Sessions))
	check("some sessions outlived the window, reported as expired", c.SessionsExpired > 0 && c.PlannedExpiries > 0)
	check("drops, silences and resumes happened", c.Drops > 0 && c.Silences > 0 && c.Resumes > 0)
	check("the agent's tool ran and replies came", c.ToolCalls > 0 && c.Replies > 0)
	check("the node was killed once", c.NodeKills == 1 && len(r.Kills) == 1 && r.Kills[0].RestartedAtS != nil)
	check("the read-back held at least what the clients saw", c.EntriesCompared > 100 && c.EntriesReread >= c.EntriesCompared)
	for _, name := range []string{HAck, HReply, HResume, HKillToResume} {
		d := r.Latency[name]
		check(name+" latency recorded", d.Count > 0 && d.P50 > 0 && d.P50 <= d.P99 && d.P99 <= d.Max)
	}
	check("replays measured", r.ReplayedPerResume.Count > 0)
	check("the node's memory and CPU read", len(r.Nodes) == 1 && r.Nodes[0].RSSPeak > 0 && r.Nodes[0].Starts == 2 && r.RSSPerSessionBytes > 0)
	check("a timeline of the run", len(r.Timeline) >= 10 && len(r.Markers) == 2)
	check("close causes counted", r.CloseCodes["induced_drop"] > 0 && r.CloseCodes["1006"] > 0)

	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	if strings.Count(html, "<svg") < 4 || !strings.Contains(html, "KILL node-0") || !strings.Contains(html, "PASSED") {
		t.Error("the HTML report lacks its charts, kill marks or verdict")
	}
	for _, ref := range []string{"src=", "<link", "@import", "url("} {
		if strings.Contains(html, ref) {
			t.Errorf("the HTML report refers to an outside resource (%q)", ref)
		}
	}
}

// Running out of ports or files is named as such.
func TestDialErrorsAreClassified(t *testing.T) {
	op := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	if err := classifyDial(op(syscall.EADDRNOTAVAIL)); !errors.Is(err, ErrOutOfPorts) || !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("EADDRNOTAVAIL: %v", err)
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		if err := classifyDial(op(e)); !errors.Is(err, ErrOutOfFiles) {
			t.Errorf("%v: %v", e, err)
		}
	}
	if err := classifyDial(op(syscall.ECONNREFUSED)); errors.Is(err, ErrOutOfPorts) || errors.Is(err, ErrOutOfFiles) {
		t.Errorf("ECONNREFUSED: %v", err)
	}
}
