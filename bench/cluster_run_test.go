package bench

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/bench/netns"
)

// A short run against three real local nodes in a cluster (replicas 2,
// fast failure detection), a random node SIGKILLed every 8 s and
// restarted, and one paused (SIGSTOP) every 9 s for 3 s, long enough to
// be declared dead, then continued: users drop, go silent and resume
// through other nodes, and every session verifies with zero violations.
func TestLocalClusterRunWithKillsHasNoViolations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three real nodes for ~30s")
	}
	rep := runLocal(t, Config{
		Local:      3,
		ServerArgs: []string{"--gossip-timing=test", "--replicas=2"},
		Sessions:   40, Ramp: 2 * time.Second, Duration: 20 * time.Second, Rate: 1,
		DropEvery: 4 * time.Second, AwayMax: time.Second, SilentFrac: 0.3,
		AgentMix: 0.3, ToolDelay: 300 * time.Millisecond, KillEvery: 8 * time.Second, Down: time.Second,
		PauseEvery: 9 * time.Second, PauseFor: 3 * time.Second,
		MaxBackoff: 500 * time.Millisecond, Drain: 20 * time.Second,
	})
	c := rep.Counts
	switch {
	case c.NodeKills < 2 || c.NodePauses < 1:
		t.Fatalf("%d node kills, %d pauses; want at least 2 and 1", c.NodeKills, c.NodePauses)
	case c.AckedSends < 100 || c.AcksVerified+c.UncheckedAcks != c.AckedSends:
		t.Fatalf("acks: %+v", c)
	case c.SessionsVerified+c.SessionsExpired != int(c.Sessions) || c.SessionsVerified == 0:
		t.Fatalf("sessions not all read back: %+v", c)
	case c.Resumes == 0:
		t.Fatalf("no resume: %+v", c)
	}
}

// The same with partitions instead of kills: the three nodes run in
// network namespaces (bench/netns), and every 6 s one is cut off from the
// other two for 3 s (both ways, or one way), while its users keep writing
// through it. Nothing acked is lost, no seq holds two contents.
func TestLocalClusterRunWithPartitionsHasNoViolations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three real nodes for ~30s")
	}
	lab, err := netns.New(context.Background(), netns.Config{Nodes: 1, Prefix: "tbp"})
	if errors.Is(err, netns.ErrUnsupported) {
		t.Skipf("no network namespaces here: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	rep := runLocal(t, Config{
		Local:      3,
		ServerArgs: []string{"--gossip-timing=test", "--replicas=2"},
		Sessions:   30, Ramp: 2 * time.Second, Duration: 15 * time.Second, Rate: 1,
		DropEvery: 4 * time.Second, AwayMax: time.Second, SilentFrac: 0.3,
		AgentMix: 0.3, ToolDelay: 300 * time.Millisecond,
		PartitionEvery: 6 * time.Second, PartitionFor: 3 * time.Second,
		MaxBackoff: 500 * time.Millisecond, Drain: 20 * time.Second,
	})
	c := rep.Counts
	switch {
	case c.NodePartitions < 2:
		t.Fatalf("%d partitions, want at least 2", c.NodePartitions)
	case c.AckedSends < 100 || c.AcksVerified+c.UncheckedAcks != c.AckedSends:
		t.Fatalf("acks: %+v", c)
	case c.SessionsVerified+c.SessionsExpired != int(c.Sessions) || c.SessionsVerified == 0:
		t.Fatalf("sessions not all read back: %+v", c)
	}
}

// --partition-every says what it needs.
func TestPartitionFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Local: 2, PartitionEvery: time.Minute}, "needs --local 3 or more"},
		{Config{Local: 3, PartitionEvery: time.Minute, PartitionFor: -time.Second}, "--partition-for must be positive"},
		{Config{Local: 3, PartitionEvery: time.Minute, Agent: "http", AgentURL: "http://127.0.0.1:1/", AgentSecret: "s"}, "cannot be used with --agent http"},
	} {
		cfg := tc.cfg
		cfg.ServerBin, cfg.DataDir = "/nonexistent/tether", t.TempDir()
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// runLocal runs cfg against real local nodes (the tether binary, a data
// directory of the test's), logs the summary, and fails the test on an
// error or any violation.
func runLocal(t *testing.T, cfg Config) *Report {
	t.Helper()
	var out, errOut bytes.Buffer
	cfg.ServerBin, cfg.DataDir, cfg.Out, cfg.Err = serverBin(t), filepath.Join(t.TempDir(), "nodes"), &out, &errOut
	b, err := New(cfg)
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
	if !rep.Passed || rep.Counts.Violations != 0 {
		t.Fatalf("violations:\n%s\n%s", out.String(), errOut.String())
	}
	return rep
}
