// Command berth-chaos runs Berth's chaos harness: it publishes uniquely
// identified messages to a transport, consumes them with several subscriber
// instances while injecting faults on a schedule, and prints a ledger of
// what was lost (must be 0), duplicated and dead-lettered, with the
// recovery time of every kind of fault. It exits 1 when the ledger shows a
// problem.
//
// Full size, as published in docs/reliability.md:
//
//	source .cache/test.env   # make services-up writes it
//	go run ./cmd/berth-chaos --transport postgres --messages 100000 --duration 10m
//	go run ./cmd/berth-chaos --transport sqlite --messages 100000 --duration 10m
//	go run ./cmd/berth-chaos --transport sqs --messages 100000 --duration 10m
//
// Brokers are found in --url, or else BERTH_TEST_POSTGRES_URL,
// BERTH_TEST_SQS_ENDPOINT and a temporary directory for SQLite.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/berth-go/berth/internal/chaos"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("berth-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		transports = fs.String("transport", "postgres,sqlite,sqs", "comma-separated transports: postgres, sqlite, sqs")
		rawURL     = fs.String("url", "", "broker location (PostgreSQL URL, SQLite directory, SQS endpoint); default from BERTH_TEST_* variables")
		messages   = fs.Int("messages", chaos.DefaultMessages, "messages per transport")
		duration   = fs.Duration("duration", chaos.DefaultDuration, "fault phase per transport")
		instances  = fs.Int("instances", chaos.DefaultInstances, "subscriber instances (even: single handler, odd: batch handler)")
		poison     = fs.Int("poison-every", chaos.DefaultPoisonEvery, "every Nth message is poison (-1: none)")
		interval   = fs.Duration("fault-interval", chaos.DefaultFaultInterval, "mean pause between faults")
		length     = fs.Duration("fault-length", chaos.DefaultFaultLength, "length of lasting faults")
		errRate    = fs.Float64("handler-error-rate", chaos.DefaultHandlerErrorRate, "share of handlings that return an error")
		panicRate  = fs.Float64("handler-panic-rate", chaos.DefaultHandlerPanicRate, "share of handlings that panic")
		kinds      = fs.String("kinds", "", "comma-separated fault kinds (default: all the transport supports)")
		seed       = fs.Uint64("seed", 0, "seed of the fault schedule (0: random)")
		keep       = fs.Bool("keep", false, "keep the run's schema or queues")
		effects    = fs.Bool("effects", false, "exactly-once effects: handlers count in the handler's transaction (SQL) or the inbox (SQS), and every count must end at 1")
		verbose    = fs.Bool("v", false, "print every fault and progress")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	failed := false
	for _, t := range strings.Split(*transports, ",") {
		t = strings.TrimSpace(t)
		cfg := chaos.Config{
			Transport: t, URL: *rawURL, Messages: *messages, Duration: *duration, Instances: *instances,
			PoisonEvery: *poison, FaultInterval: *interval, FaultLength: *length,
			HandlerErrorRate: *errRate, HandlerPanicRate: *panicRate, Seed: *seed, Keep: *keep, Effects: *effects,
		}
		if *kinds != "" {
			for _, k := range strings.Split(*kinds, ",") {
				cfg.Kinds = append(cfg.Kinds, chaos.Kind(strings.TrimSpace(k)))
			}
		}
		if *verbose {
			cfg.Progress = stderr
		}
		if cfg.URL == "" {
			switch t {
			case "postgres":
				cfg.URL = os.Getenv("BERTH_TEST_POSTGRES_URL")
			case "sqs":
				cfg.URL = os.Getenv("BERTH_TEST_SQS_ENDPOINT")
			case "sqlite":
				dir, err := os.MkdirTemp("", "berth-chaos-")
				if err != nil {
					fmt.Fprintln(stderr, err)
					return 1
				}
				defer os.RemoveAll(dir)
				cfg.URL = dir
			}
		}
		if cfg.URL == "" {
			fmt.Fprintf(stderr, "berth-chaos: %s: no --url and no BERTH_TEST_* variable (run `make services-up` and `source .cache/test.env`)\n", t)
			return 2
		}
		start := time.Now()
		rep, err := chaos.Run(ctx, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "berth-chaos: %s: %v\n", t, err)
			return 1
		}
		rep.Print(stdout)
		fmt.Fprintf(stdout, "wall time %s\n\n", time.Since(start).Round(time.Second))
		if !rep.OK() {
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}
