package receiver_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/mem"
)

// A transport builds its subscriber with one receiver.NewSubscriber call
// over a source factory; the pipeline does the rest.
func Example() {
	broker := mem.NewBroker()
	sub, _ := mem.NewSubscriber(mem.SubscriberConfig{Broker: broker,
		Pipeline: receiver.Config{Concurrency: 2}}, nil)
	defer sub.Close()

	msgs, _ := sub.Subscribe(context.Background(), "t")
	broker.Publish("t", message.NewMessage("a", []byte("1")))
	m := <-msgs
	fmt.Println(m.UUID, string(m.Payload), sub.ListenerStates()[0].InFlight)
	m.Ack()
	// Output: a 1 1
}

func newTrackedMessage(p *receiver.Pending) *message.Message {
	m := message.NewMessage("m", nil)
	ctx, _ := receiver.NewMessageContext(context.Background(), p, nil)
	m.SetContext(ctx)
	return m
}

// A batching stage moves a message from in flight to batch pending; settle
// is effective once.
func ExampleEnterBatch() {
	pending := receiver.NewPending(nil)
	msg := newTrackedMessage(pending)
	settle := receiver.EnterBatch(msg)
	fmt.Println(pending.Load())
	settle()
	settle()
	fmt.Println(pending.Load())
	// Output:
	// 1
	// 0
}

// A receiver builds each message's context with NewMessageContext; a
// batching stage joins the message to a batch, and the receiver's Cancel
// (when it gives the message up) drops it from the batch.
func ExampleJoinBatch() {
	pending := receiver.NewPending(nil)
	ctx, tracker := receiver.NewMessageContext(context.Background(), pending, nil)
	msg := message.NewMessage("m", nil)
	msg.SetContext(ctx)

	dropped := make(chan struct{})
	settle, _ := receiver.JoinBatch(msg, func() { close(dropped) })
	fmt.Println(pending.Load())
	tracker.Cancel() // e.g. Close's deadline passed
	<-dropped
	settle()
	fmt.Println(pending.Load())
	// Output:
	// 1
	// 0
}

// A router with DeadLetterReason: a poison message reaches the dead letters
// with its handler's error after the attempt count. One URL serves the
// publisher and the subscriber, max_attempts included.
func ExampleDeadLetterReason() {
	ctx := context.Background()
	const url = "mem://example-dead-letters?max_attempts=2&retry_delay=1ms"
	pub, err := transport.OpenPublisher(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	sub, err := transport.OpenSubscriber(ctx, url)
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(receiver.DeadLetterReason())
	router.AddConsumerHandler("orders", "orders", sub, func(m *message.Message) error {
		return fmt.Errorf("order %s: card declined", m.UUID)
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	<-router.Running()

	if err := pub.Publish("orders", message.NewMessage("42", []byte(`{"total":99}`))); err != nil {
		panic(err)
	}
	broker := mem.Named("example-dead-letters")
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); len(broker.DeadLetters("orders", "")) == 0 && time.Now().Before(deadline); {
		<-tick.C
	}
	_ = router.Close()
	<-ran
	for _, dl := range broker.DeadLetters("orders", "") {
		fmt.Println(dl.UUID, dl.Reason)
	}
	// Output:
	// 42 nacked on attempt 2 of 2 (MaxAttempts): order 42: card declined
}
