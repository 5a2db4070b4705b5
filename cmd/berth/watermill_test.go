package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
)

// wmFixture is a watermill-sql topic on PostgreSQL with n messages, of
// which the consumer group "billing" consumed (acked) the first acked
// through watermill-sql's own subscriber; "audit" never subscribed.
func wmFixture(t *testing.T, n, acked int) (fromURL, topic string, uuids []string) {
	t.Helper()
	fromURL = testenv.PostgresSchemaURL(t)
	db, err := postgres.Open(fromURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	topic = testenv.UniqueName("wm_orders")
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{
		SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i := range n {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"n": %d}`, i)))
		m.Metadata.Set("n", fmt.Sprint(i))
		m.Metadata.Set("origin", "watermill-sql")
		if err := pub.Publish(topic, m); err != nil {
			t.Fatal(err)
		}
		uuids = append(uuids, m.UUID)
	}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
		ConsumerGroup:    "billing",
		SchemaAdapter:    wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 1},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     10 * time.Millisecond,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := range acked {
		select {
		case m := <-ch:
			if m.UUID != uuids[i] {
				t.Fatalf("watermill-sql delivered %s, want %s", m.UUID, uuids[i])
			}
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("watermill-sql delivered %d of %d", i, acked)
		}
	}
	// The offset of the last ack is committed before the next row is
	// handed over: wait for it, then stop the subscriber.
	for {
		var off int64
		err := db.QueryRowContext(ctx, `SELECT offset_acked FROM "watermill_offsets_`+topic+`" WHERE consumer_group = 'billing'`).Scan(&off)
		if err == nil && off >= int64(acked) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("billing's offset never reached %d: %v", acked, err)
		}
		select {
		case m := <-ch:
			m.Nack() // the next row: not consumed
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	return fromURL, topic, uuids
}

// row returns the data row of group in migrate watermill-sql's output.
func row(t *testing.T, out, group string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 8 && f[1] == group {
			return f
		}
	}
	t.Fatalf("no row for group %s in:\n%s", group, out)
	return nil
}

// receive consumes from the Berth queue of (topic, group) until it has
// every UUID of want and of markers (earlier receives' markers, published
// through Berth after the group was registered), failing on a duplicate
// or a stranger; then, with a marker of its own published through Berth,
// checks that nothing else was waiting. It returns that marker.
func receive(t *testing.T, berthURL, topic, group string, want, markers []string, metaWant func(uuid string) string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := transport.OpenSubscriber(ctx, berthURL, transport.WithConsumerGroup(group))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := transport.OpenPublisher(ctx, berthURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	wanted := map[string]bool{}
	for _, u := range want {
		wanted[u] = true
	}
	for _, u := range markers {
		wanted[u] = true
	}
	got := map[string]bool{}
	marker := ""
	for {
		select {
		case m := <-ch:
			m.Ack()
			if m.UUID == marker {
				if len(got) != len(wanted) {
					t.Fatalf("group %s: %d of %d messages before the marker", group, len(got), len(wanted))
				}
				return marker
			}
			if !wanted[m.UUID] || got[m.UUID] {
				t.Fatalf("group %s: unexpected or duplicate message %s (duplicate %v, metadata %v)", group, m.UUID, got[m.UUID], m.Metadata)
			}
			got[m.UUID] = true
			if slices.Contains(markers, m.UUID) {
				// published by an earlier receive
			} else if v := m.Metadata.Get("n"); v != metaWant(m.UUID) || m.Metadata.Get("origin") != "watermill-sql" ||
				string(m.Payload) != fmt.Sprintf(`{"n": %s}`, v) {
				t.Fatalf("group %s: message %s lost its payload or metadata: %q %v", group, m.UUID, m.Payload, m.Metadata)
			}
			if len(got) == len(wanted) && marker == "" {
				marker = watermill.NewUUID()
				if err := pub.Publish(topic, message.NewMessage(marker, nil)); err != nil {
					t.Fatal(err)
				}
			}
		case <-ctx.Done():
			t.Fatalf("group %s: received %d of %d", group, len(got), len(want))
		}
	}
}

// berth migrate watermill-sql copies exactly each group's unconsumed
// messages (billing acked 10 of 30 in watermill-sql; audit never
// subscribed: all 30), resumes an interrupted run without duplicates,
// copies nothing the second time, and Berth then delivers them with
// payload and metadata intact.
func TestMigrateWatermillSQL(t *testing.T) {
	const n, acked = 30, 10
	from, topic, uuids := wmFixture(t, n, acked)
	to := testenv.PostgresURL(t) + "&table_prefix=" + testenv.UniqueName("wm") + "_"
	args := []string{"migrate", "watermill-sql", "--from", from, "--url", to, "--topic", topic, "--group", "billing", "--group", "audit"}

	out := mustRun(t, append(args, "--dry-run")...)
	if r := row(t, out, "billing"); r[4] != "20" || r[5] != "10" {
		t.Fatalf("dry run, billing: %v, want 20 to copy, 10 skipped\n%s", r, out)
	}
	if r := row(t, out, "audit"); r[4] != "30" || r[5] != "0" {
		t.Fatalf("dry run, audit: %v, want 30 to copy\n%s", r, out)
	}

	// Interrupted after two batches of 7 of billing's 20.
	errCrash := errors.New("crash")
	watermillAfterBatch = func(group string, copied int) error {
		if group == "billing" && copied == 14 {
			return errCrash
		}
		return nil
	}
	code, out, errs := runCmd(t, append(args, "--batch", "7")...)
	watermillAfterBatch = nil
	if code == 0 || !strings.Contains(errs, "crash") {
		t.Fatalf("interrupted run: exit %d\n%s\n%s", code, out, errs)
	}
	if r := row(t, out, "billing"); r[4] != "14" {
		t.Fatalf("interrupted run, billing: %v, want 14 copied\n%s", r, out)
	}

	out = mustRun(t, append(args, "--batch", "7")...)
	if r := row(t, out, "billing"); r[4] != "6" || r[5] != "24" {
		t.Fatalf("resumed run, billing: %v, want 6 copied, 24 skipped\n%s", r, out)
	}
	if r := row(t, out, "audit"); r[4] != "30" || r[5] != "0" {
		t.Fatalf("resumed run, audit: %v, want 30 copied\n%s", r, out)
	}
	out = mustRun(t, args...)
	for _, g := range []string{"billing", "audit"} {
		if r := row(t, out, g); r[4] != "0" || r[5] != "30" {
			t.Fatalf("second run, %s: %v, want 0 copied, 30 skipped\n%s", g, r, out)
		}
	}

	index := map[string]string{}
	for i, u := range uuids {
		index[u] = fmt.Sprint(i)
	}
	meta := func(u string) string { return index[u] }
	// The import registered both groups: billing's marker reaches audit.
	m := receive(t, to, topic, "billing", uuids[acked:], nil, meta)
	receive(t, to, topic, "audit", uuids, []string{m}, meta)
}

// Without --group, the groups are those of watermill_offsets_<topic>; a
// table that is not watermill-sql's is refused.
func TestMigrateWatermillSQLGroupsAndErrors(t *testing.T) {
	from, topic, _ := wmFixture(t, 5, 2)
	to := testenv.PostgresURL(t) + "&table_prefix=" + testenv.UniqueName("wm") + "_"
	out := mustRun(t, "migrate", "watermill-sql", "--from", from, "--url", to, "--topic", topic)
	if r := row(t, out, "billing"); r[4] != "3" {
		t.Fatalf("billing: %v\n%s", r, out)
	}
	if strings.Contains(out, "audit") {
		t.Fatalf("a group absent from watermill_offsets was copied:\n%s", out)
	}
	code, _, errs := runCmd(t, "migrate", "watermill-sql", "--from", from, "--url", to, "--topic", "no_such_topic")
	if code == 0 || !strings.Contains(errs, "no table watermill_no_such_topic") {
		t.Fatalf("missing topic: exit %d, %s", code, errs)
	}
	code, _, errs = runCmd(t, "migrate", "watermill-sql", "--url", to, "--topic", topic)
	if code != 2 || !strings.Contains(errs, "--from is required") {
		t.Fatalf("no --from: exit %d, %s", code, errs)
	}
}

// The queue schema (PostgreSQLQueueSchema, acked flag): the messages not
// acked are copied once, into the default group.
func TestMigrateWatermillSQLQueueSchema(t *testing.T) {
	from := testenv.PostgresSchemaURL(t)
	db, err := postgres.Open(from, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	topic := testenv.UniqueName("wm_queue")
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{
		SchemaAdapter: wsql.PostgreSQLQueueSchema{}, AutoInitializeSchema: true,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for i := range 6 {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"n": %d}`, i)))
		m.Metadata.Set("n", fmt.Sprint(i))
		m.Metadata.Set("origin", "watermill-sql")
		if err := pub.Publish(topic, m); err != nil {
			t.Fatal(err)
		}
		uuids = append(uuids, m.UUID)
	}
	_ = pub.Close()
	// Two acked, as PostgreSQLQueueOffsetsAdapter marks them.
	if _, err := db.Exec(`UPDATE "watermill_`+topic+`" SET acked = TRUE WHERE uuid IN ($1, $2)`, uuids[0], uuids[3]); err != nil {
		t.Fatal(err)
	}
	to := testenv.PostgresURL(t) + "&table_prefix=" + testenv.UniqueName("wm") + "_"
	args := []string{"migrate", "watermill-sql", "--from", from, "--url", to, "--topic", topic}
	out := mustRun(t, args...)
	if r := row(t, out, "-"); r[3] != "postgresql-queue" || r[4] != "4" || r[5] != "2" {
		t.Fatalf("first run: %v\n%s", r, out)
	}
	out = mustRun(t, args...)
	if r := row(t, out, "-"); r[4] != "0" {
		t.Fatalf("second run: %v\n%s", r, out)
	}
	index := map[string]string{}
	for i, u := range uuids {
		index[u] = fmt.Sprint(i)
	}
	receive(t, to, topic, "", []string{uuids[1], uuids[2], uuids[4], uuids[5]}, nil, func(u string) string { return index[u] })
}
