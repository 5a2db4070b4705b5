package postgres_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/orderingtest"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// A database at schema version 1, with a subscribed queue table that has
// no ordering_key column: migration 2 adds the column and key index to
// every subscribed table (a publisher writes into subscribed tables
// without creating them, so it relies on the migration), and keyed rows
// then claim as heads of their key.
func TestMigration2AddsOrderingKey(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, 4)
	d := postgres.Dialect{}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, "old", "g")
	for _, s := range []string{
		`CREATE TABLE berth_schema_version (version integer NOT NULL PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO berth_schema_version (version) VALUES (1)`,
		`CREATE TABLE berth_subscriptions (topic text NOT NULL, consumer_group text NOT NULL, queue_table text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (topic, consumer_group))`,
		`CREATE TABLE berth_errors (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue_table text NOT NULL, message_uuid text NOT NULL, headers text NOT NULL, body bytea NOT NULL, attempts integer NOT NULL, reason text NOT NULL, original_id bigint NOT NULL, created_at timestamptz NOT NULL, failed_at timestamptz NOT NULL DEFAULT now())`,
		`CREATE TABLE ` + q.Table + ` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, uuid text NOT NULL, headers text NOT NULL, body bytea NOT NULL, state smallint NOT NULL DEFAULT 0, owner bigint, attempts integer NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now(), due_at timestamptz NOT NULL DEFAULT now(), lease_until timestamptz, expires_at timestamptz)`,
		`CREATE INDEX ` + q.Name + `_pending ON ` + q.Table + ` (due_at, id) WHERE state = 0`,
		`INSERT INTO berth_subscriptions (topic, consumer_group, queue_table) VALUES ('old', 'g', '` + q.Name + `')`,
		`INSERT INTO ` + q.Table + ` (uuid, headers, body) VALUES ('before', '{}', '\x00')`,
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	pub := newPub(t, db)
	var msgs []*message.Message
	for _, p := range []string{"k1", "k2"} {
		m := message.NewMessage(watermill.NewUUID(), []byte(p))
		m.Metadata.Set(transport.MetadataOrderingKey, "k")
		msgs = append(msgs, m)
	}
	if err := pub.Publish("old", msgs...); err != nil {
		t.Fatalf("publish into the upgraded table: %v", err)
	}
	var idx bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, q.Name+"_key").Scan(&idx); err != nil || !idx {
		t.Fatalf("key index after migration 2: %v, %v", idx, err)
	}
	src := newSource(t, db, "old", func(c *sqlqueue.SubscriberConfig) { c.ConsumerGroup = "g" })
	_, got := sqlqueuetest.ClaimPayloads(t, src, 10)
	if len(got) != 2 || got[0] != "\x00" || got[1] != "k1" {
		t.Fatalf("claimed %q; want the old row and k1 (k2 waits behind k1)", got)
	}
}

// ordered_nack=dead_letter (through the URL): a nacked keyed message is
// dead-lettered at once into the error table and its key moves on; an
// unkeyed one is retried.
func TestOrderedNackDeadLetter(t *testing.T) {
	base := testenv.PostgresSchemaURL(t)
	ctx := t.Context()
	pub, err := transport.OpenPublisher(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(ctx, withParams(t, base, "ordered_nack", "dead_letter", "retry_delay", "10ms", "empty_delay", "50ms"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	db := openDBAt(t, base)
	const topic = "ordered_nack"
	if err := sub.(message.SubscribeInitializer).SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	orderingtest.OrderedNackDeadLetter(t, pub, sub, topic, func(t *testing.T) map[string]string {
		out := map[string]string{}
		for _, d := range deadLetters(t, db, topic) {
			out[d.UUID] = d.Reason
		}
		return out
	})
}

func openDBAt(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := postgres.Open(url, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
