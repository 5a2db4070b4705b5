package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
)

// The first publish of a database can be an outbox one: the caller's
// transaction holds the pool's one connection, so the tables are created
// inside it (they waited for a second connection forever). A rollback
// takes them away and nothing is remembered: the next publish, in a
// transaction or not, creates them again.
func TestPublishInTxFirstCreatesTablesInside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	pub, err := sqlite.NewPublisher(sqlite.PublisherConfig{DSN: path, Groups: map[string][]string{"orders": {"billing"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hung := false // a blocked publish would block these too
	defer func() {
		if !hung {
			pub.Close()
		}
	}()
	db, closer, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if !hung {
			closer.Close()
		}
	}()
	if _, err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	inTx := func(id string, commit bool) error {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.Exec("INSERT INTO orders (id) VALUES (?)", id); err != nil {
			return err
		}
		txPub, err := transport.PublishInTx(pub, tx)
		if err != nil {
			return err
		}
		if err := txPub.Publish("orders", message.NewMessage(id, nil)); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback()
		}
		return tx.Commit()
	}
	// A deadlock is a failure, not a hung test binary.
	bounded := func(what string, fn func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(30 * time.Second):
			hung = true
			t.Fatalf("%s: still blocked after 30s (waiting for a second connection?)", what)
		}
	}
	bounded("rolled-back first publish", func() error { return inTx("o1", false) })
	bounded("committed publish", func() error { return inTx("o2", true) })
	bounded("plain publish", func() error { return pub.Publish("orders", message.NewMessage("o3", nil)) })

	sub, err := sqlite.NewSubscriber(subConfig(path, "billing"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"o2": true, "o3": true}
	for len(want) > 0 {
		select {
		case m := <-ch:
			m.Ack()
			if !want[m.UUID] {
				t.Fatalf("received %s, want o2 and o3 once each (o1 was rolled back)", m.UUID)
			}
			delete(want, m.UUID)
		case <-ctx.Done():
			t.Fatalf("never arrived: %v", want)
		}
	}
}
