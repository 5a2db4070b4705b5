package batching_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/berth-go/berth/batching"
)

// A Handler in a Watermill router: each message's handler call returns
// when its batch has ended, and the router acks it then.
func ExampleHandler() {
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)

	var (
		mu    sync.Mutex
		total int
		done  = make(chan struct{})
	)
	h, err := batching.NewHandler(batching.Config{MaxSize: 5, MaxWait: time.Minute},
		func(ctx context.Context, msgs []*message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			total += len(msgs)
			fmt.Printf("batch of %d\n", len(msgs)) // one INSERT … VALUES (…), (…), …
			if total == 10 {
				close(done)
			}
			return nil
		})
	if err != nil {
		panic(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
	}
	router.AddConsumerHandler("rows", "rows", pubSub, h.Handle)
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()

	for i := range 10 {
		_ = pubSub.Publish("rows", message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i))))
	}
	<-done

	_ = router.Close()                // stops deliveries, waits for running handlers
	_ = h.Close(context.Background()) // then the batcher
	// Output:
	// batch of 5
	// batch of 5
}

// A Subscriber in a Watermill router: the router gets one message per
// batch, and HandlerFunc hands its members to the BatchFunc. Closing the
// router closes the Subscriber, which flushes the open batch to the router
// first.
func ExampleSubscriber() {
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)

	var (
		mu    sync.Mutex
		total int
		done  = make(chan struct{})
	)
	insertRows := func(ctx context.Context, msgs []*message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		total += len(msgs)
		fmt.Printf("batch of %d\n", len(msgs)) // one INSERT … VALUES (…), (…), …
		if total == 10 {
			close(done)
		}
		return nil
	}
	sub, err := batching.NewSubscriber(pubSub, batching.Config{MaxSize: 5, MaxWait: time.Minute})
	if err != nil {
		panic(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
	}
	router.AddConsumerHandler("rows", "rows", sub, batching.HandlerFunc(insertRows))
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()

	for i := range 10 {
		_ = pubSub.Publish("rows", message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i))))
	}
	<-done

	_ = router.Close() // starts closing sub, which closes pubSub
	_ = sub.Close()    // waits until that is done
	// Output:
	// batch of 5
	// batch of 5
}

// Consume reads a Subscribe channel and acks or nacks each member itself.
// A PartialError names the members that failed.
func ExampleConsume() {
	msgs := make(chan *message.Message, 4)
	var sent []*message.Message
	for _, p := range []string{"a", "bad", "c", "d"} {
		m := message.NewMessage(watermill.NewUUID(), []byte(p))
		sent = append(sent, m)
		msgs <- m
	}
	close(msgs) // as a subscriber does when it is closed

	err := batching.Consume(context.Background(), msgs, batching.Config{MaxSize: 10},
		func(ctx context.Context, batch []*message.Message) error {
			var failed []int
			for i, m := range batch {
				if strings.HasPrefix(string(m.Payload), "bad") {
					failed = append(failed, i)
				}
			}
			if failed != nil {
				return batching.Fail(fmt.Errorf("rejected"), failed...)
			}
			return nil
		})
	fmt.Println("Consume:", err)
	for _, m := range sent {
		select {
		case <-m.Acked():
			fmt.Println(string(m.Payload), "acked")
		case <-m.Nacked():
			fmt.Println(string(m.Payload), "nacked")
		}
	}
	// Output:
	// Consume: <nil>
	// a acked
	// bad nacked
	// c acked
	// d acked
}
