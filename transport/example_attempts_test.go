package transport_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/mem"
)

// Each nacked attempt leaves a line in the message's
// MetadataAttemptErrors (on the SQL queues and mem): the handler, the dead
// letter and the console see why the earlier attempts failed.
// receiver.DeadLetterReason records a router handler's error as the
// attempt's reason.
func ExampleAttemptErrors() {
	ctx := context.Background()
	pub, _ := transport.OpenPublisher(ctx, "mem://attempts")
	sub, _ := transport.OpenSubscriber(ctx, "mem://attempts?retry_delay=1ms")
	defer sub.Close()

	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddMiddleware(receiver.DeadLetterReason())
	done := make(chan []transport.AttemptError)
	router.AddConsumerHandler("charge", "charges", sub, func(msg *message.Message) error {
		earlier := transport.AttemptErrors(msg.Metadata)
		if len(earlier) < 2 {
			return fmt.Errorf("card declined (try %d)", len(earlier)+1)
		}
		done <- earlier
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	_ = pub.Publish("charges", message.NewMessage(watermill.NewUUID(), []byte("42")))
	for _, e := range <-done {
		fmt.Printf("attempt %d: %s\n", e.Attempt, e.Reason)
	}
	_ = router.Close()
	// Output:
	// attempt 1: card declined (try 1)
	// attempt 2: card declined (try 2)
}
