package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-dev/tether/gateway/node/nodetest"
)

// `tether bench --local 1` starts its own executable as the node, and its
// JSON report says the run passed; a run with no target is a usage error
// (exit 2).
func TestBenchCommand(t *testing.T) {
	report := filepath.Join(t.TempDir(), "bench.json")
	cmd := exec.Command(nodetest.Binary(t), "bench", "--local", "1", "--sessions", "5", "--ramp", "500ms",
		"--duration", "3s", "--drop-every", "1s", "--away-max", "300ms", "--json", report)
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tether bench: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "PASSED") {
		t.Errorf("no verdict in the summary:\n%s", out)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Passed bool `json:"passed"`
		Counts struct {
			AckedSends       int `json:"acked_sends"`
			Violations       int `json:"violations"`
			SessionsVerified int `json:"sessions_verified"`
		} `json:"counts"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if !r.Passed || r.Counts.Violations != 0 || r.Counts.AckedSends == 0 || r.Counts.SessionsVerified != 5 {
		t.Fatalf("report: %+v", r)
	}

	cmd = exec.Command(nodetest.Binary(t), "bench", "--sessions", "5")
	cmd.Env = childEnv()
	out, err = cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--local") {
		t.Fatalf("bench without a target: %v\n%s", err, out)
	}
}
