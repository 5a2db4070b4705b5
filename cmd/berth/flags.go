package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlags returns a flag set whose Usage writes the command's help to
// stderr: synopsis, about and the flags. The flag package prints nothing
// itself: parse prints the help for --help and returns every other parse
// failure as a usage error, which run reports once.
func newFlags(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\n%s\n", synopsis, strings.TrimSpace(about))
		if hasFlags(fs) {
			fmt.Fprintf(stderr, "\nFlags:\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parse parses args allowing flags after positional arguments
// ("dlq show 42 --url …") and returns the positional ones. For -h or
// --help it prints the help and returns flag.ErrHelp; any other failure is
// a usage error.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	help := fs.Usage
	// The flag package calls Usage on every failure, not only for --help.
	fs.Usage = func() {}
	defer func() { fs.Usage = help }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				help()
				return nil, err
			}
			return nil, usageError{flagMessage(err)}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// flagMessage rewords the flag package's errors with the double dashes
// the help and the docs use: "unknown flag --frob", "invalid value "x" for
// --messages: parse error".
func flagMessage(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "flag --" + name + " needs a value"
	}
	// invalid value "x" for flag -n: …, invalid boolean value "x" for -b: …
	if i := strings.Index(msg, " for flag -"); i >= 0 {
		return msg[:i] + " for --" + msg[i+len(" for flag -"):]
	}
	if i := strings.Index(msg, " for -"); i >= 0 {
		return msg[:i] + " for --" + msg[i+len(" for -"):]
	}
	return msg
}

// usageError is a command-line mistake: run prints it on one line with a
// hint and the exit code is 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// requireURL reports a missing --url.
func requireURL(u string) error {
	if u == "" {
		return usagef("--url is required (postgres://…, sqlite:///path.db, sqlserver://…, sqs://…); or set BERTH_URL")
	}
	return nil
}
