package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// flags is a command's flag set. A flag may be bound to an environment
// variable, which then gives its default and is checked exactly like the
// flag (TETHER_WINDOW=abc is an error, not the default). A bad flag is
// one line and a hint; -h and --help print the flags and succeed.
type flags struct {
	*flag.FlagSet
	cmd    string
	intro  string // printed before the flags by --help; default a usage line
	stdout io.Writer
	bound  [][2]string // flag name, environment variable
}

func (m *Main) newFlags(name string) *flags {
	fs := flag.NewFlagSet("tether "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by Parse, in one line
	return &flags{FlagSet: fs, cmd: name, stdout: m.Stdout}
}

// bind makes the flag take its default from the environment variable.
func (f *flags) bind(flagName, envName string) {
	f.bound = append(f.bound, [2]string{flagName, envName})
}

// Parse applies the bound environment variables, then args.
func (f *flags) Parse(args []string) error {
	for _, b := range f.bound {
		if v, ok := os.LookupEnv(b[1]); ok {
			if err := f.Set(b[0], v); err != nil {
				return fmt.Errorf("%s: %s=%q: %v", f.cmd, b[1], v, unwrapFlagErr(err))
			}
		}
	}
	for _, b := range f.bound {
		if fl := f.Lookup(b[0]); fl == nil {
			continue
		} else if l, ok := fl.Value.(*listFlag); ok {
			l.fromEnv = len(l.vals) > 0
		}
	}
	err := f.FlagSet.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		if f.intro != "" {
			fmt.Fprint(f.stdout, f.intro)
		} else {
			fmt.Fprintf(f.stdout, "usage: tether %s [flags]\n\nflags:\n", f.cmd)
		}
		f.SetOutput(f.stdout)
		f.PrintDefaults()
		return flag.ErrHelp
	case err != nil:
		return fmt.Errorf("%s: %v (run \"tether %s --help\" for the flags)", f.cmd, err, f.cmd)
	case f.NArg() > 0:
		return fmt.Errorf("%s: unexpected argument %q (run \"tether %s --help\" for the flags)", f.cmd, f.Arg(0), f.cmd)
	}
	return nil
}

// unwrapFlagErr trims the flag package's wording around a value's error.
func unwrapFlagErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// env returns the environment variable's value, or def when it is unset.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// listFlag is a repeatable flag: each use adds values, split at sep. What
// its environment variable gave is replaced by the first use on the
// command line, so that there too a flag wins over the environment.
type listFlag struct {
	sep     string
	vals    []string
	fromEnv bool // vals are the environment's, until the first flag
}

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.vals, l.sep)
}

func (l *listFlag) Set(v string) error {
	if l.fromEnv {
		l.vals, l.fromEnv = nil, false
	}
	for _, s := range strings.Split(v, l.sep) {
		if s = strings.TrimSpace(s); s != "" {
			l.vals = append(l.vals, s)
		}
	}
	return nil
}
