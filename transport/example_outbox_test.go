package transport_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/sqlite"
)

// The transactional outbox: the business write and the message commit
// together, or neither happens. DBOf and PublishInTx find the
// capability through decorators such as telemetry.Publisher.
func ExamplePublishInTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "shop.db")
	url := "sqlite://" + path

	raw, err := transport.OpenPublisher(ctx, url)
	if err != nil {
		panic(err)
	}
	pub := telemetry.Publisher(raw, telemetry.Config{})
	defer pub.Close()
	// The database the publisher writes to (on SQLite, the process's
	// shared connection of the file), for the application's own
	// transactions; it belongs to the publisher.
	db, err := transport.DBOf(pub)
	if err != nil {
		panic(err) // transport.ErrTxUnsupported on mem:// and sqs://
	}
	if _, err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY)"); err != nil {
		panic(err)
	}

	placeOrder := func(id string, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		if _, err := tx.Exec("INSERT INTO orders (id) VALUES (?)", id); err != nil {
			return err
		}
		txPub, err := transport.PublishInTx(pub, tx)
		if err != nil {
			return err // transport.ErrTxUnsupported on mem:// and sqs://
		}
		if err := txPub.Publish("orders", message.NewMessage(id, []byte(`{"id":"`+id+`"}`))); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback()
		}
		return tx.Commit()
	}
	if err := placeOrder("order-1", false); err != nil { // rolled back: no row, no message
		panic(err)
	}
	if err := placeOrder("order-2", true); err != nil {
		panic(err)
	}

	sub, err := transport.OpenSubscriber(ctx, url+"?concurrency=1")
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		panic(err)
	}
	m := <-msgs
	fmt.Println("received", m.UUID)
	m.Ack()
	var n int
	_ = db.QueryRow("SELECT COUNT(*) FROM orders").Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// received order-2
	// orders: 1
}
