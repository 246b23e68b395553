package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	m := &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	if err := m.Run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // help was asked for and printed
		}
		fmt.Fprintln(os.Stderr, "tether:", err)
		code := 2
		var ee exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		os.Exit(code)
	}
}

// exitError is an error that asks for a particular exit code (the others
// exit 2).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// Main holds the program's streams so tests can run commands in process.
type Main struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

const usage = `usage: tether <command> [flags]

commands:
  serve     run a node (HTTP + WebSocket)
  token     print a signed token for a user
  chat      terminal chat that resumes by itself
  bench     load harness: users that drop, resume and verify every session
  version   print the version

Run "tether <command> --help" for a command's flags.`

// Run runs the command named by args[0].
func (m *Main) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(m.Stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return m.serve(ctx, args[1:])
	case "token":
		return m.token(args[1:])
	case "chat":
		return m.chat(ctx, args[1:])
	case "bench":
		return m.bench(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(m.Stdout, usage)
		return nil
	case "version", "-version", "--version":
		fmt.Fprintln(m.Stdout, "tether", version())
		return nil
	}
	fmt.Fprintln(m.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// version is the module version the binary was built from, with the VCS
// revision when the build recorded one.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "+dirty"
		}
	}
	return v + " " + bi.GoVersion
}
