package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
)

// A queue table made before schema version 2 (no ordering_key column) is
// upgraded at first use: the column and its index are added, an old row is
// unkeyed, and keyed rows then claim as heads of their key.
func TestUpgradeAddsOrderingKey(t *testing.T) {
	ctx := context.Background()
	db, closer, err := sqlite.Open(filepath.Join(t.TempDir(), "old.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	d := sqlite.Dialect{}
	q := sqlqueue.QueueFor(d, sqlqueue.Tables{}, "old", "")
	for _, s := range []string{
		`CREATE TABLE berth_schema_version (version INTEGER NOT NULL PRIMARY KEY, applied_at INTEGER NOT NULL DEFAULT 0)`,
		`INSERT INTO berth_schema_version (version) VALUES (1)`,
		`CREATE TABLE berth_subscriptions (topic TEXT NOT NULL, consumer_group TEXT NOT NULL, queue_table TEXT NOT NULL, created_at INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (topic, consumer_group))`,
		`CREATE TABLE berth_errors (id INTEGER PRIMARY KEY AUTOINCREMENT, queue_table TEXT NOT NULL, message_uuid TEXT NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL, attempts INTEGER NOT NULL, reason TEXT NOT NULL, original_id INTEGER NOT NULL, created_at INTEGER NOT NULL, failed_at INTEGER NOT NULL)`,
		`CREATE TABLE ` + q.Table + ` (id INTEGER PRIMARY KEY AUTOINCREMENT, uuid TEXT NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL, state INTEGER NOT NULL DEFAULT 0, owner INTEGER, attempts INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, due_at INTEGER NOT NULL, lease_until INTEGER, expires_at INTEGER)`,
		`CREATE INDEX ` + q.Name + `_pending ON ` + q.Table + ` (due_at, id) WHERE state = 0`,
		`INSERT INTO ` + q.Table + ` (uuid, headers, body, created_at, due_at) VALUES ('before', '{}', x'00', 0, 0)`,
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	pub, err := sqlqueue.NewPublisher(d, sqlqueue.PublisherConfig{DB: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var msgs []*message.Message
	for _, p := range []string{"k1", "k2"} {
		m := message.NewMessage(watermill.NewUUID(), []byte(p))
		m.Metadata.Set(transport.MetadataOrderingKey, "k")
		msgs = append(msgs, m)
	}
	if err := pub.Publish("old", msgs...); err != nil {
		t.Fatal(err)
	}
	c := sqlqueue.SubscriberConfig{DB: db, SweepInterval: -1}
	src, err := sqlqueue.NewSource(ctx, d, c, "old", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	_, got := sqlqueuetest.ClaimPayloads(t, src, 10)
	if len(got) != 2 || got[0] != "\x00" || got[1] != "k1" {
		t.Fatalf("claimed %q; want the old row and k1 (k2 waits behind k1)", got)
	}
	var version int
	if err := db.QueryRowContext(ctx, `SELECT max(version) FROM berth_schema_version`).Scan(&version); err != nil || version != 2 {
		t.Fatalf("schema version = %d, %v; want 2", version, err)
	}
}
