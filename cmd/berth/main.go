// Command berth runs Berth's demo, its operations tools and its benchmarks.
//
//	berth demo    [--url URL] [--messages N] [--rate R] [--fail P] [--health-addr ADDR]
//	berth migrate --url URL [--print] [--queue TOPIC[:GROUP]]…
//	berth migrate watermill-sql --from URL --url URL --topic T [--group G]… [--dry-run]
//	berth queues  --url URL [--json]
//	berth groups  [--url] URL [TOPIC] [--json]
//	berth groups retire [--url] URL TOPIC GROUP [--force] [--grace D]
//	berth dlq     list | show ID | replay | purge  --url URL [filters] [--dry-run]
//	berth console --url URL [--addr 127.0.0.1:8080] [--read-only] [--health-url URL]…
//	berth health  --addr http://host:port[/path]
//	berth bench   [--scenario NAME]… [--scale F] [--out DIR] [--allow-skip]
//
// With no --url the demo runs on the embedded default transport (SQLite in
// a temporary file). The operations commands take the same transport URLs
// as the services (or $BERTH_URL). Every command prints its flags with
// --help. Exit codes: 0 success, 1 failure (including an unhealthy
// service for berth health, and a bench scenario skipped without
// --allow-skip), 2 a command-line mistake (an unknown flag or command, a
// bad flag value, a URL naming no transport or with a bad parameter).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/berth-go/berth/transport"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first Ctrl-C stops the command gracefully (the demo still prints
	// its summary); a second one kills it.
	context.AfterFunc(ctx, stop)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `berth — Watermill transports for SQS and SQL queue tables

Usage:
  berth demo [flags]     run a small service on the embedded default (or --url)
  berth migrate [flags]  create or upgrade the SQL schema (--print: show the DDL)
  berth migrate watermill-sql [flags]
                         copy watermill-sql's unconsumed messages into Berth queues
  berth queues [flags]   each queue's ready, delayed, in-flight and dead-lettered counts
  berth groups [flags]   each consumer group's counts and last reader (retire: unregister and drop one)
  berth dlq SUBCOMMAND   list, show, replay or purge dead letters
  berth pause [flags]    pause a SQL queue fleet-wide (berth resume undoes it)
  berth console [flags]  serve a web console for queues, dead letters and the fleet
  berth health [flags]   query a running service's health endpoint
  berth bench [flags]    run the benchmark scenarios, write results and SVG charts

Run 'berth <command> --help' for the command's flags.
`

// commands names the commands in the order the usage lists them.
const commands = "demo, migrate, queues, groups, dlq, pause, resume, console, health, bench"

// run dispatches to a command and returns the process exit code. Every
// error is printed once, on one line, prefixed with the command ("berth
// dlq list: …"); a command-line mistake (a usage error, or a URL that
// names no transport or has a bad parameter) adds a hint and exits 2.
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
		if len(args) > 1 && args[1] == "watermill-sql" {
			err = migrateWatermillSQL(ctx, args[2:], stdout, stderr)
			break
		}
		err = migrate(ctx, args[1:], stdout, stderr)
	case "queues":
		err = queues(ctx, args[1:], stdout, stderr)
	case "groups":
		err = groupsCmd(ctx, args[1:], stdout, stderr)
	case "dlq":
		err = dlq(ctx, args[1:], stdout, stderr)
	case "pause", "resume":
		err = pauseCmd(ctx, args[0], args[1:], stdout, stderr)
	case "console":
		err = consoleCmd(ctx, args[1:], stdout, stderr)
	case "health":
		err = healthCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "berth: unknown command %q (commands: %s)\n", args[0], commands)
		return 2
	}
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case isUsage(err) || errors.Is(err, transport.ErrInvalidConfig) || errors.Is(err, transport.ErrUnknownScheme):
		fmt.Fprintf(stderr, "berth %s: %s; see --help\n", commandName(args), errorText(err))
		return 2
	default:
		fmt.Fprintf(stderr, "berth %s: %s\n", commandName(args), errorText(err))
		return 1
	}
}

// commandName is the command that args ran: "demo", or "dlq list" for a
// dlq subcommand.
func commandName(args []string) string {
	if args[0] == "dlq" && len(args) > 1 && slices.Contains(dlqSubcommands, args[1]) {
		return "dlq " + args[1]
	}
	if args[0] == "groups" && len(args) > 1 && args[1] == "retire" {
		return "groups retire"
	}
	if args[0] == "migrate" && len(args) > 1 && args[1] == "watermill-sql" {
		return "migrate watermill-sql"
	}
	return args[0]
}

// errorText is err's message without the "berth: " of Berth's sentinels
// (transport.ErrInvalidConfig is "berth: invalid config"): run's prefix
// already says berth.
func errorText(err error) string {
	msg := strings.TrimPrefix(err.Error(), "berth: ")
	return strings.ReplaceAll(msg, ": berth: ", ": ")
}
