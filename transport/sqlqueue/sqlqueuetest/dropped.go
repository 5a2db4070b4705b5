package sqlqueuetest

import (
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// testPublisherRecreatesDroppedQueue: a publisher whose queue table was
// dropped after it first published (an operator's DROP, a restored
// database) makes it again and publishes, as a subscriber does; with
// ManualSchema it reports ErrQueueNotFound instead of a driver error.
func testPublisherRecreatesDroppedQueue(t *testing.T, h Harness) {
	f := h.open(t)
	db := f.pool(t, 4)
	sub := f.newSubscriber(t, f.subConfig(db))
	if err := sub.SubscribeInitialize("dropped"); err != nil {
		t.Fatal(err)
	}
	table := sub.Queue("dropped").Table
	pub := f.newPub(t, db)
	if err := pub.Publish("dropped", message.NewMessage("before", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DROP TABLE ` + table); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("dropped", message.NewMessage("after", []byte("x"))); err != nil {
		t.Fatalf("publish after the queue table was dropped: %v", err)
	}
	exactly(t, "the queue made again", uuids(t, db, table), []string{"after"})

	manual := f.newPub(t, db, func(c *sqlqueue.PublisherConfig) { c.Tables.ManualSchema = true })
	if err := manual.Publish("dropped", message.NewMessage("warm", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DROP TABLE ` + table); err != nil {
		t.Fatal(err)
	}
	err := manual.Publish("dropped", message.NewMessage("lost", []byte("x")))
	if !errors.Is(err, transport.ErrQueueNotFound) {
		t.Fatalf("ManualSchema publish to a dropped table = %v, want ErrQueueNotFound", err)
	}
}
