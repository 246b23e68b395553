package main

import (
	"context"
	"embed"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/term"

	"github.com/tether-dev/tether/bench"
)

const benchUsage = `usage: tether bench (--local N | --url ws://host:port/v1/ws ...) [flags]

Drives simulated users against the nodes: each sends, waits for its
replies, drops its connection or goes silent at random moments, stays away
(sometimes beyond the reconnect window) and resumes through another node.
Every session is verified end to end and read back after the run; any
violation makes the exit code 1. See bench/README.md.

flags:
`

// pythonAgent is the Python example endpoint, which `tether bench --local
// N --agent http` starts (written to a temp dir) unless --agent-url or
// --agent-script says otherwise.
//
//go:embed examples/agent-python/agent.py examples/agent-python/tether_endpoint.py
var pythonAgent embed.FS

// writePythonAgent writes the example to a new temp dir and returns its
// agent.py.
func writePythonAgent() (string, func(), error) {
	dir, err := os.MkdirTemp("", "tether-bench-agent-")
	if err != nil {
		return "", nil, fmt.Errorf("bench: the example agent: %w", err)
	}
	done := func() { _ = os.RemoveAll(dir) }
	for _, name := range []string{"agent.py", "tether_endpoint.py"} {
		b, err := pythonAgent.ReadFile("examples/agent-python/" + name)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		if err != nil {
			done()
			return "", nil, fmt.Errorf("bench: the example agent: %w", err)
		}
	}
	return filepath.Join(dir, "agent.py"), done, nil
}

// bench runs the load harness. Its exit code is 1 when the run found a
// violation (the summary and --json say which), 2 for a usage or setup
// error, 0 otherwise.
func (m *Main) bench(ctx context.Context, args []string) error {
	var cfg bench.Config
	fs := m.newFlags("bench")
	fs.intro = benchUsage
	cfg.RegisterFlags(fs.FlagSet)
	fs.bind("agent-secret", envName("agent-secret"))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.Agent == "http" && cfg.AgentURL == "" && cfg.AgentScript == "" {
		script, done, err := writePythonAgent()
		if err != nil {
			return err
		}
		defer done()
		cfg.AgentScript = script
	}
	if cfg.Local > 0 && cfg.ServerBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find the tether binary for --local (give --server-bin): %w", err)
		}
		cfg.ServerBin = exe
	}
	cfg.Out, cfg.Err = m.Stdout, m.Stderr
	if f, ok := m.Stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		cfg.ErrIsTerminal = true
	}
	cfg.Logger = slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := bench.New(cfg)
	if err != nil {
		return err
	}
	rep, err := b.Run(ctx)
	if cerr := b.Close(); cerr != nil {
		cfg.Logger.Warn("stopping the local nodes", "err", cerr)
	}
	if err != nil {
		return err
	}
	if !rep.Passed {
		return exitError{code: 1, err: fmt.Errorf("bench: %d violations", rep.Violations.Total)}
	}
	return nil
}
