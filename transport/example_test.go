package transport_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/mem"
)

// The URL picks the transport; a problem in it is an error that names it.
func ExampleOpenSubscriber() {
	ctx := context.Background()
	_, err := transport.OpenSubscriber(ctx, "kafka://broker:9092")
	fmt.Println(errors.Is(err, transport.ErrUnknownScheme))

	_, err = transport.OpenSubscriber(ctx, "mem://orders?concurrency=many")
	fmt.Println(err)

	sub, err := transport.OpenSubscriber(ctx, "mem://orders?concurrency=4&max_attempts=5")
	fmt.Println(err)
	_ = sub.Close()
	// Output:
	// true
	// mem: berth: invalid config: parameter "concurrency": "many" is not an integer from 1 to 1048576
	// <nil>
}

// A batching stage moves a message from in flight to batch pending; settle
// is effective once.
func ExampleEnterBatch() {
	pending := transport.NewPending(nil)
	msg := newTrackedMessage(pending)
	settle := transport.EnterBatch(msg)
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
	pending := transport.NewPending(nil)
	ctx, tracker := transport.NewMessageContext(context.Background(), pending, nil)
	msg := message.NewMessage("m", nil)
	msg.SetContext(ctx)

	dropped := make(chan struct{})
	settle, _ := transport.JoinBatch(msg, func() { close(dropped) })
	fmt.Println(pending.Load())
	tracker.Cancel() // e.g. Close's deadline passed
	<-dropped
	settle()
	fmt.Println(pending.Load())
	// Output:
	// 1
	// 0
}
