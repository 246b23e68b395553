// Command tether is the one Tether binary: serve, token, chat, bench.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	m := &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	if err := m.Run(ctx, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "tether:", err)
		}
		os.Exit(2)
	}
}

// Main holds the program's streams so tests can run commands in process.
type Main struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

const usage = `usage: tether <command> [flags]

commands:
  serve   run a node (HTTP + WebSocket)
  token   print a signed token for a user
  chat    terminal chat that resumes by itself
  bench   load harness: users that drop, resume and verify every session

Run "tether <command> -h" for a command's flags.`

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
	}
	fmt.Fprintln(m.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// newFlags makes a flag set whose errors and help go to m.Stderr.
func (m *Main) newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("tether "+name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	return fs
}

// env returns the environment variable's value, or def when it is unset:
// flags take their defaults from the environment, and a flag given on the
// command line wins over both.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
