// Command berth runs Berth's demo, its operations tools and its benchmarks.
//
//	berth demo    [--url URL] [--messages N] [--rate R] [--fail P] [--health-addr ADDR]
//	berth migrate --url URL [--print] [--queue TOPIC[:GROUP]]…
//	berth queues  --url URL [--json]
//	berth dlq     list | show ID | replay | purge  --url URL [filters] [--dry-run]
//	berth health  --addr http://host:port[/path]
//	berth bench   [--scenario NAME]… [--scale F] [--out DIR]
//
// With no --url the demo runs on the embedded default transport (SQLite in
// a temporary file). The operations commands take the same transport URLs
// as the services (or $BERTH_URL). Every command prints its flags with
// --help. Exit codes: 0 success, 1 failure (including an unhealthy
// service for berth health), 2 a command-line mistake.
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
  berth demo [flags]     run a small service on the embedded default (or --url)
  berth migrate [flags]  create or upgrade the SQL schema (--print: show the DDL)
  berth queues [flags]   each queue's ready, delayed, in-flight and dead-lettered counts
  berth dlq SUBCOMMAND   list, show, replay or purge dead letters
  berth health [flags]   query a running service's health endpoint
  berth bench [flags]    run the benchmark scenarios, write results and SVG charts

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
	case "migrate":
		err = migrate(ctx, args[1:], stdout, stderr)
	case "queues":
		err = queues(ctx, args[1:], stdout, stderr)
	case "dlq":
		err = dlq(ctx, args[1:], stdout, stderr)
	case "health":
		err = healthCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(ctx, args[1:], stdout, stderr)
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
	if isUsage(err) {
		fmt.Fprintf(stderr, "berth %s: %v (see 'berth %s --help')\n", args[0], err, args[0])
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "berth %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
