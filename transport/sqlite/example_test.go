package sqlite_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/sqlite"
)

func Example() {
	ctx := context.Background()
	pub, err := transport.OpenPublisher(ctx, "sqlite://:memory:")
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(ctx, "sqlite://:memory:?concurrency=4&empty_delay=50ms")
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	msgs, err := sub.Subscribe(ctx, "greetings")
	if err != nil {
		panic(err)
	}
	if err := pub.Publish("greetings", message.NewMessage("1", []byte("hello"))); err != nil {
		panic(err)
	}
	m := <-msgs
	fmt.Println(string(m.Payload), "attempt", m.Metadata.Get(transport.MetadataAttempt))
	m.Ack()
	// Output: hello attempt 1
}
