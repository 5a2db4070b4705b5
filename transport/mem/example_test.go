package mem_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/mem"
)

// Open a publisher and a subscriber by URL; swapping the URL swaps the
// transport. A nacked message comes back with its attempt counted.
func Example() {
	ctx := context.Background()
	pub, _ := transport.OpenPublisher(ctx, "mem://example")
	sub, _ := transport.OpenSubscriber(ctx, "mem://example?concurrency=1&retry_delay=1ms")
	defer sub.Close()
	defer pub.Close()

	msgs, _ := sub.Subscribe(ctx, "orders")
	_ = pub.Publish("orders", message.NewMessage("order-1", []byte(`{"sku":"A1"}`)))

	m := <-msgs
	fmt.Println(m.UUID, "attempt", m.Metadata.Get(transport.MetadataAttempt))
	m.Nack()
	m = <-msgs
	fmt.Println(m.UUID, "attempt", m.Metadata.Get(transport.MetadataAttempt))
	m.Ack()
	// Output:
	// order-1 attempt 1
	// order-1 attempt 2
}
