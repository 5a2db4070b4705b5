package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/transport/postgres"
)

// watermillAfterBatch, when set by a test, runs after each committed batch
// of migrate watermill-sql (see inspect.ImportOptions.AfterBatch).
var watermillAfterBatch func(group string, copied int) error

func migrateWatermillSQL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("berth migrate watermill-sql",
		"berth migrate watermill-sql --from POSTGRES_URL --url URL --topic T [--group G]… [--batch N] [--dry-run]", `
Copies the messages of a watermill-sql topic (PostgreSQL: table
watermill_<topic>) that each consumer group has not consumed yet into the
Berth queue of (topic, group): UUID, payload and metadata as they are.
Supported watermill-sql v4 schemas: DefaultPostgreSQLSchema with
DefaultPostgreSQLOffsetsAdapter (a group's unconsumed messages are those
after its position in watermill_offsets_<topic>; a group without one gets
every message) and PostgreSQLQueueSchema with PostgreSQLQueueOffsetsAdapter
(the messages not acked; it has no consumer groups). MySQL is not supported.

Without --group, every group in watermill_offsets_<topic> is copied (the
default group "" when there is none). The target's schema and queue tables
are created first, as berth migrate does. Progress is recorded in the
target's <prefix>migrated_watermill table in the same transaction as each
batch: running it again, or after a crash, never copies a message twice,
and copies what watermill-sql publishers wrote since. Stop watermill-sql's
subscribers before running it.

--dry-run counts what would be copied and writes nothing.`, stderr)
	from := fs.String("from", "", "the watermill-sql PostgreSQL database (postgres://…)")
	u := fs.String("url", envURL(), "Berth SQL transport URL to copy into (postgres://, sqlite://); default $BERTH_URL")
	topic := fs.String("topic", "", "watermill-sql topic (table watermill_<topic>)")
	var groups multi
	fs.Var(&groups, "group", "consumer group to copy for (repeatable; default: every group of the topic)")
	batch := fs.Int("batch", inspect.DefaultImportBatch, "messages per target transaction")
	dry := fs.Bool("dry-run", false, "count what would be copied; write nothing")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("unexpected argument %q", pos[0])
	case *from == "":
		return usagef("--from is required (the watermill-sql PostgreSQL URL)")
	case *topic == "":
		return usagef("--topic is required")
	case *batch < 1:
		return usagef("--batch must be at least 1, got %d", *batch)
	}
	if err := requireURL(*u); err != nil {
		return err
	}
	src, err := postgres.Open(*from, 2)
	if err != nil {
		return fmt.Errorf("open --from: %w", err)
	}
	defer src.Close()
	s, err := inspect.OpenSQL(ctx, *u)
	if err != nil {
		if errors.Is(err, inspect.ErrNotSQL) {
			return fmt.Errorf("migrate watermill-sql copies into SQL transports only: %w", err)
		}
		return err
	}
	defer s.Close()
	res, err := s.ImportWatermillSQL(ctx, src, inspect.ImportOptions{
		Topic: *topic, Groups: groups, Batch: *batch, DryRun: *dry, AfterBatch: watermillAfterBatch,
	})
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	verb := "COPIED"
	if *dry {
		verb = "TO COPY"
	}
	fmt.Fprintf(tw, "TOPIC\tGROUP\tQUEUE\tSCHEMA\t%s\tSKIPPED\tLAST TX\tLAST OFFSET\n", verb)
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", r.Topic, dash(r.Group), r.Queue, r.Schema, r.Copied, r.Skipped, r.LastTxID, r.LastOffset)
	}
	_ = tw.Flush()
	return err
}
