package transporttest_test

import (
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport/mem"
	"github.com/berth-go/berth/transport/transporttest"
)

// A transport's conformance test hands the kit its constructors; in a
// _test.go file it is called as transporttest.Run(t, cfg) and
// transporttest.RunFaults(t, cfg).
func Example() {
	broker := mem.NewBroker()
	cfg := transporttest.Config{
		Features: tests.Features{ConsumerGroups: true, Persistent: true},
		NewPubSubWith: func(t *testing.T, p receiver.Config) (message.Publisher, message.Subscriber) {
			pub, _ := mem.NewPublisher(mem.PublisherConfig{Broker: broker}, nil)
			sub, _ := mem.NewSubscriber(mem.SubscriberConfig{Broker: broker, Pipeline: p}, nil)
			return pub, sub
		},
		DeadLetters: func(t *testing.T, topic string) []transporttest.DeadLetter {
			var out []transporttest.DeadLetter
			for _, d := range broker.DeadLetters(topic, "") {
				out = append(out, transporttest.DeadLetter{UUID: d.UUID, Reason: d.Reason})
			}
			return out
		},
	}
	fmt.Println(cfg.NewPubSubWith != nil, len(cfg.DeadLetters(nil, "none")))
	// Output: true 0
}
