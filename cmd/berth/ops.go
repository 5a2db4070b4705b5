package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

func envURL() string { return os.Getenv("BERTH_URL") }

// parseQueuePair reads "topic" or "topic:group".
func parseQueuePair(s string) sqlqueue.QueueRef {
	t, g, _ := strings.Cut(s, ":")
	return sqlqueue.QueueRef{Topic: t, ConsumerGroup: g}
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("berth migrate", "berth migrate --url URL [--print] [--queue TOPIC[:GROUP]]…", `
Creates Berth's tables in a SQL database, or upgrades them to this build's
schema version, under the same cluster-wide lock that starting subscribers
take (safe while services run). The queue table of every subscription is
created or upgraded too, and of each --queue given. --queue TOPIC:GROUP also
registers the consumer group, as its subscribers will: from then on every
publish to TOPIC reaches GROUP, and the messages parked so far (published
while TOPIC had no subscription) are copied to it. --queue TOPIC creates the
default queue only.

With --print, nothing is changed: the DDL script is written to stdout for
DBAs who apply schema by hand (then run services with manual_schema=true).
--print needs no database connection for postgres:// and sqlserver:// URLs.`, stderr)
	u := fs.String("url", envURL(), "SQL transport URL (postgres://, sqlite://, sqlserver://); default $BERTH_URL")
	print := fs.Bool("print", false, "print the DDL instead of applying it")
	var queues multi
	fs.Var(&queues, "queue", "also create the queue table of TOPIC[:GROUP] and register GROUP, copying the topic's parked messages to it (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := requireURL(*u); err != nil {
		return err
	}
	var pairs []sqlqueue.QueueRef
	for _, q := range queues {
		pairs = append(pairs, parseQueuePair(q))
	}
	if *print {
		s, err := inspect.PlanSQL(*u)
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, s.DDL(pairs...))
		return nil
	}
	s, err := inspect.OpenSQL(ctx, *u)
	if err != nil {
		if errors.Is(err, inspect.ErrNotSQL) {
			return fmt.Errorf("migrate works on SQL transports only: %w (SQS queues are created by the transport with create=true)", err)
		}
		return err
	}
	defer s.Close()
	from, to, err := s.Migrate(ctx, pairs...)
	if err != nil {
		return err
	}
	if from == to {
		fmt.Fprintf(stdout, "schema is at version %d (up to date)\n", to)
	} else {
		fmt.Fprintf(stdout, "schema migrated from version %d to %d\n", from, to)
	}
	return nil
}

func queues(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("berth queues", "berth queues --url URL [--prefix P] [--json]", `
Prints each queue's counts: ready (can be received now), delayed (not yet
due: a delay or a retry backoff), in flight (received, not yet settled) and
dead-lettered. SQL: every queue table (subscribed or found by its prefix),
counted by state, and the error table's rows per queue. SQS: the
approximate counts of every queue (optionally under --prefix) and of its
dead-letter queue. PAUSED says which SQL queues are paused fleet-wide
(berth pause). GROUP (parked) marks a topic's default queue that no default
reader subscribed to: its messages, published while the topic had no
subscription, wait there for consumer groups registered later.`, stderr)
	u := fs.String("url", envURL(), "transport URL; default $BERTH_URL")
	prefix := fs.String("prefix", "", "SQS: only queues whose name starts with this")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := requireURL(*u); err != nil {
		return err
	}
	in, err := inspect.Open(ctx, *u)
	if err != nil {
		return err
	}
	defer in.Close()
	if s, ok := in.(*inspect.SQS); ok {
		s.Prefix = *prefix
	}
	qs, err := in.Queues(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if qs == nil {
			qs = []inspect.QueueStats{}
		}
		return enc.Encode(qs)
	}
	if len(qs) == 0 {
		fmt.Fprintln(stdout, "no queues")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tTOPIC\tGROUP\tREADY\tDELAYED\tIN FLIGHT\tDEAD\tPAUSED\t")
	for _, q := range qs {
		dead := upTo(q.DeadLettered, q.DeadLetteredMore)
		if q.DeadLetterQueue != "" {
			dead += " (" + q.DeadLetterQueue + ")"
		}
		name := q.Queue
		if q.Missing {
			name += " (missing)"
		}
		paused := "-"
		if q.Paused {
			paused = "paused"
		}
		group := dash(q.Group)
		if q.Parked {
			group = "(parked)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t\n", name, dash(q.Topic), group, q.Ready, q.Delayed, q.InFlight, dead, paused)
	}
	return tw.Flush()
}

// pauseCmd is berth pause and berth resume.
func pauseCmd(ctx context.Context, action string, args []string, stdout, stderr io.Writer) error {
	about := `
Pauses a queue fleet-wide: within one reporting interval every subscriber
started with fleet_interval (SubscriberConfig.FleetInterval) releases its
prefetched messages of the queue and stops claiming from it, until berth
resume. Publishing goes on. SQL transports only.`
	synopsis := "berth pause --url URL --queue QUEUE [--by TEXT]"
	if action == "resume" {
		about = `
Resumes a queue paused with berth pause (or the console): its listeners
claim again within one reporting interval.`
		synopsis = "berth resume --url URL --queue QUEUE"
	}
	fs := newFlags("berth "+action, synopsis, about, stderr)
	u := fs.String("url", envURL(), "transport URL; default $BERTH_URL")
	queue := fs.String("queue", "", "queue table or topic (required)")
	var by *string
	if action == "pause" {
		by = fs.String("by", "berth pause", "who or why, shown with the pause")
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := requireURL(*u); err != nil {
		return err
	}
	if *queue == "" {
		return usagef("--queue is required")
	}
	s, err := inspect.OpenSQL(ctx, *u)
	if err != nil {
		if errors.Is(err, inspect.ErrNotSQL) {
			return fmt.Errorf("%s works on SQL transports only: %w (SQS: see docs/console.md, Fleet)", action, err)
		}
		return err
	}
	defer s.Close()
	var (
		q       string
		changed bool
	)
	if action == "pause" {
		q, changed, err = s.Pause(ctx, *queue, *by)
	} else {
		q, changed, err = s.Resume(ctx, *queue)
	}
	if err != nil {
		return err
	}
	done := map[string]string{"pause": "paused", "resume": "resumed"}[action]
	if changed {
		fmt.Fprintf(stdout, "%s %s\n", done, q)
	} else {
		fmt.Fprintf(stdout, "%s was already %s\n", q, done)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// dlqSubcommands are berth dlq's subcommands, in the order the help
// lists them.
var dlqSubcommands = []string{"list", "show", "replay", "purge"}

// dlqSynopsis is each dlq subcommand's usage line.
var dlqSynopsis = map[string]string{
	"list":   "berth dlq list [--url URL] [filters] [--limit N] [--json]",
	"show":   "berth dlq show ID [--url URL] [--json]",
	"replay": "berth dlq replay [--url URL] [filters] [--dry-run]",
	"purge":  "berth dlq purge [--url URL] [filters] [--dry-run]",
}

const dlqFilters = `
Filters (combined with AND):
  --queue Q        queue table or topic (SQL), source queue name (SQS); an
                   unknown queue is an error
  --reason TEXT    reason contains TEXT (case-insensitive)
  --older-than D   dead-lettered more than D ago (e.g. 1h, 30m)
  --newer-than D   dead-lettered less than D ago
  --filter K=V     the same as key=value: queue=, reason=, older=, newer=, id= (repeatable)`

func dlq(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("missing subcommand: list, show, replay or purge")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		synopses := make([]string, len(dlqSubcommands))
		for i, sub := range dlqSubcommands {
			synopses[i] = dlqSynopsis[sub]
		}
		fmt.Fprintf(stderr, "Usage: %s\n\nWorks on dead letters: the SQL error table, or the SQS dead-letter queue\nnamed by the URL's dead_letter_queue parameter.\nRun 'berth dlq <list|show|replay|purge> --help' for flags.\n",
			strings.Join(synopses, "\n       "))
		return flag.ErrHelp
	}
	sub, args := args[0], args[1:]
	about := map[string]string{
		"list":   "Lists dead letters, oldest first (SQS: peeks without hiding them).",
		"show":   "Shows one dead letter: reason, attempts, metadata and payload.",
		"replay": "Moves dead letters back to their queue as new messages (attempts start again)\nand removes them from the dead letters. SQS: sends each to the queue named in its\nberth_dead_letter attribute. --dry-run lists what would move.",
		"purge":  "Deletes dead letters for good. --dry-run lists what would be deleted.",
	}[sub]
	if about == "" {
		return usagef("unknown subcommand %q: want list, show, replay or purge", sub)
	}
	if sub != "show" {
		about += "\n" + dlqFilters
	}
	fs := newFlags("berth dlq "+sub, dlqSynopsis[sub], about, stderr)
	u := fs.String("url", envURL(), "transport URL; default $BERTH_URL")
	var f inspect.Filter
	var filters multi
	var limit int
	var asJSON, dry bool
	if sub != "show" {
		fs.StringVar(&f.Queue, "queue", "", "only this queue (table name or topic; SQS: source queue)")
		fs.StringVar(&f.Reason, "reason", "", "only reasons containing this text")
		fs.DurationVar(&f.OlderThan, "older-than", 0, "only dead letters older than this")
		fs.DurationVar(&f.NewerThan, "newer-than", 0, "only dead letters newer than this")
		fs.Var(&filters, "filter", "filter as key=value: queue, reason, older, newer, id (repeatable)")
	}
	switch sub {
	case "list":
		fs.IntVar(&limit, "limit", 100, "at most this many (0: all)")
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	case "show":
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	default:
		fs.BoolVar(&dry, "dry-run", false, "list what would be done, change nothing")
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if sub == "show" {
		if len(pos) != 1 {
			return usagef("needs exactly one ID")
		}
		f.IDs = pos
	} else if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if limit < 0 {
		return usagef("--limit must be ≥ 0 (0: all), got %d", limit)
	}
	for _, kv := range filters {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return usagef("--filter %q: want key=value", kv)
		}
		switch k {
		case "queue", "topic":
			f.Queue = v
		case "reason":
			f.Reason = v
		case "older", "older_than", "older-than", "newer", "newer_than", "newer-than":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return usagef("--filter %s: %q is not a duration such as 1h", k, v)
			}
			if strings.HasPrefix(k, "older") {
				f.OlderThan = d
			} else {
				f.NewerThan = d
			}
		case "id":
			f.IDs = append(f.IDs, v)
		default:
			return usagef("--filter: unknown key %q (want queue, reason, older, newer, id)", k)
		}
	}
	if err := requireURL(*u); err != nil {
		return err
	}
	in, err := inspect.Open(ctx, *u)
	if err != nil {
		return err
	}
	defer in.Close()
	switch sub {
	case "list":
		ds, err := in.DeadLetters(ctx, f, limit)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, ds)
		}
		printDead(stdout, ds)
		return nil
	case "show":
		ds, err := in.DeadLetters(ctx, f, 1)
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			return fmt.Errorf("no dead letter with id %s", pos[0])
		}
		if asJSON {
			return writeJSON(stdout, ds[0])
		}
		showDead(stdout, ds[0])
		return nil
	case "replay":
		ds, err := in.Replay(ctx, f, dry)
		if err != nil && len(ds) == 0 {
			return err
		}
		verb := "replayed"
		if dry {
			verb = "would replay"
		}
		if len(ds) > 0 {
			printDead(stdout, ds)
		}
		fmt.Fprintf(stdout, "%s %d dead letter(s)\n", verb, len(ds))
		return err
	default:
		ds, err := in.Purge(ctx, f, dry)
		if err != nil && len(ds) == 0 {
			return err
		}
		verb := "purged"
		if dry {
			verb = "would purge"
		}
		if len(ds) > 0 {
			printDead(stdout, ds)
		}
		fmt.Fprintf(stdout, "%s %d dead letter(s)\n", verb, len(ds))
		return err
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printDead(w io.Writer, ds []inspect.DeadLetter) {
	if len(ds) == 0 {
		fmt.Fprintln(w, "no dead letters")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tQUEUE\tUUID\tATTEMPTS\tFAILED\tREASON")
	now := time.Now()
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s ago\t%s\n", d.ID, d.Queue, d.UUID, d.Attempts, now.Sub(d.FailedAt).Round(time.Second), oneLine(d.Reason, 80))
	}
	_ = tw.Flush()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		return string(r[:n-1]) + "…"
	}
	return s
}

// showDead prints d; its earlier attempts (transport.MetadataAttemptErrors)
// get lines of their own rather than a metadata entry.
func showDead(w io.Writer, d inspect.DeadLetter) {
	fmt.Fprintf(w, "id:        %s\nqueue:     %s\nuuid:      %s\nattempts:  %d\nfailed at: %s\nreason:    %s\n",
		d.ID, d.Queue, d.UUID, d.Attempts, d.FailedAt.UTC().Format(time.RFC3339), d.Reason)
	if es := transport.AttemptErrors(d.Metadata); len(es) > 0 {
		fmt.Fprintln(w, "earlier attempts:")
		for _, e := range es {
			fmt.Fprintf(w, "  %d at %s", e.Attempt, e.At.Format(time.RFC3339Nano))
			if e.Reason != "" {
				fmt.Fprintf(w, ": %s", e.Reason)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w, "metadata:")
	keys := make([]string, 0, len(d.Metadata))
	for k := range d.Metadata {
		if k != transport.MetadataAttemptErrors {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %s\n", k, d.Metadata[k])
	}
	if utf8.Valid(d.Payload) {
		fmt.Fprintf(w, "payload (%d bytes):\n%s\n", len(d.Payload), d.Payload)
	} else {
		fmt.Fprintf(w, "payload (%d bytes, binary):\n%x\n", len(d.Payload), d.Payload)
	}
}
