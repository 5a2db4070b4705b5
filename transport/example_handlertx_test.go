package transport_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
)

// Exactly-once effects: the handler's writes commit with its ack, in the
// transaction TxFromContext hands it (watermill-sql's TxFromContext). A
// handler that fails rolls its writes back and the message is retried, so
// each payment is applied once, however often it was delivered.
func ExampleTxFromContext() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "handlertx")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "bank.db")
	url := "sqlite://" + path

	db, closer, err := sqlite.Open(path) // the user's tables: same database as the queue
	if err != nil {
		panic(err)
	}
	defer closer.Close()
	if _, err := db.Exec("CREATE TABLE balance (account TEXT PRIMARY KEY, cents INTEGER NOT NULL)"); err != nil {
		panic(err)
	}
	if _, err := db.Exec("INSERT INTO balance VALUES ('alice', 0)"); err != nil {
		panic(err)
	}

	pub, err := transport.OpenPublisher(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(ctx, url+"?retry_delay=10ms")
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	router.AddConsumerHandler("payments", "payments", sub, func(msg *message.Message) error {
		tx, err := transport.TxFromContext(msg.Context())
		if err != nil {
			return err // transport.ErrTxUnsupported on mem:// and sqs://
		}
		if _, err := tx.ExecContext(msg.Context(), "UPDATE balance SET cents = cents + 250 WHERE account = 'alice'"); err != nil {
			return err
		}
		if msg.Metadata.Get(transport.MetadataAttempt) == "1" {
			return errors.New("the first attempt fails after its write: rolled back")
		}
		close(done)
		return nil // the ack commits the write
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	if err := pub.Publish("payments", message.NewMessage(watermill.NewUUID(), []byte("250"))); err != nil {
		panic(err)
	}
	<-done
	_ = router.Close() // waits for the handler's ack, which commits

	var cents int
	_ = db.QueryRow("SELECT cents FROM balance WHERE account = 'alice'").Scan(&cents)
	fmt.Println("alice:", cents)
	// Output:
	// alice: 250
}
