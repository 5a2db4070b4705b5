package telemetry_test

import (
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport/mem"
)

// countingPublisher counts Publish calls: the mem transport's "round trips".
// It embeds the concrete publisher, so its MessagingSystem is promoted and
// telemetry.Publisher still learns the transport's system.
type countingPublisher struct {
	*mem.Publisher
	mu sync.Mutex
	n  int64
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
	return p.Publisher.Publish(topic, msgs...)
}

func (p *countingPublisher) RoundTrips() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return map[string]int64{"publish": p.n}
}

var memBackend = backend{
	system: mem.MessagingSystem,
	group:  "billing",
	open: func(t *testing.T, pcfg receiver.Config) (message.Publisher, subscriber, telemetry.RoundTripper) {
		b := mem.NewBroker()
		pub, err := mem.NewPublisher(mem.PublisherConfig{Broker: b}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := mem.NewSubscriber(mem.SubscriberConfig{Broker: b, Pipeline: pcfg, ConsumerGroup: "billing"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cp := &countingPublisher{Publisher: pub}
		return cp, sub, cp
	},
}

func TestMem(t *testing.T) { runSuite(t, memBackend) }
