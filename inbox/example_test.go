package inbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/inbox"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
)

// An SQS (here mem://) consumer whose effects live in a SQL database: the
// inbox records each message in the handler's transaction, so a
// redelivered or duplicated message changes nothing.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "inbox")
	defer os.RemoveAll(dir)
	db, closer, err := sqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	defer closer.Close()
	if _, err := db.Exec("CREATE TABLE stock (sku TEXT PRIMARY KEY, n INTEGER NOT NULL)"); err != nil {
		panic(err)
	}
	if _, err := db.Exec("INSERT INTO stock VALUES ('apple', 10)"); err != nil {
		panic(err)
	}

	in, err := inbox.New(ctx, inbox.Config{DB: db})
	if err != nil {
		panic(err)
	}
	defer in.Close(ctx)

	url := "mem://inbox-example" // sqs://… in production
	pub, _ := transport.OpenPublisher(ctx, url)
	defer pub.Close()
	sub, _ := transport.OpenSubscriber(ctx, url)
	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddMiddleware(in.Middleware)
	router.AddConsumerHandler("reserve", "orders", sub, func(msg *message.Message) error {
		tx, err := transport.TxFromContext(msg.Context()) // the inbox's transaction
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(msg.Context(), "UPDATE stock SET n = n - 1 WHERE sku = 'apple'")
		return err
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	// The same order twice: a duplicate the broker cannot tell apart.
	for range 2 {
		if err := pub.Publish("orders", message.NewMessage("order-1", []byte("apple"))); err != nil {
			panic(err)
		}
	}
	for in.Handled()+in.Skipped() < 2 {
		time.Sleep(10 * time.Millisecond) // both handled or skipped

	}
	_ = router.Close()
	_ = sub.Close()

	var n int
	_ = db.QueryRow("SELECT n FROM stock WHERE sku = 'apple'").Scan(&n)
	fmt.Println("apples left:", n, "skipped:", in.Skipped())
	// Output:
	// apples left: 9 skipped: 1
}
