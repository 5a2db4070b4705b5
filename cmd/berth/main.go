// Command berth runs Berth's demo and operations tools.
//
//	berth demo [--url URL] [--messages N] [--rate R] [--fail P]
//
// With no --url the demo runs on the embedded default transport.
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `berth — Watermill transports for SQS and SQL queue tables

Usage:
  berth demo [flags]    run a small service on the embedded default (or --url)

Run 'berth <command> --help' for the command's flags.
`

// run dispatches to a command and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "demo":
		err = demo(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "berth: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "berth:", err)
		return 1
	}
	return 0
}
