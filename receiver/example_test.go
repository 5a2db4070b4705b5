package receiver_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/mem"
)

// A transport builds its subscriber from a source factory and receiver.New;
// the pipeline does the rest.
func Example() {
	broker := mem.NewBroker()
	sub, _ := mem.NewSubscriber(mem.SubscriberConfig{Broker: broker,
		Pipeline: transport.PipelineConfig{Concurrency: 2}}, nil)
	defer sub.Close()
	_ = receiver.New // mem.NewSubscriber passes it to transport.NewSubscriber

	msgs, _ := sub.Subscribe(context.Background(), "t")
	broker.Publish("t", message.NewMessage("a", []byte("1")))
	m := <-msgs
	fmt.Println(m.UUID, string(m.Payload), sub.ListenerStates()[0].InFlight)
	m.Ack()
	// Output: a 1 1
}
