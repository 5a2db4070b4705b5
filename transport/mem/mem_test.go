package mem_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/mem"
	"github.com/berth-go/berth/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.WatermillSuiteLeaks...) }

// TestConformance runs Watermill's full suite through the URL API, and
// Berth's behaviours through the typed constructors.
func TestConformance(t *testing.T) {
	transporttest.Run(t, config(t))
}

// TestDelays checks that Watermill's delay metadata (components/delay) is
// honoured with sub-second precision, and a malformed value refused.
func TestDelays(t *testing.T) {
	transporttest.RunDelays(t, config(t), transporttest.Delays{SubSecond: true})
}

// TestFaults injects panics at every pipeline point (not in parallel: the
// injector is process-wide).
func TestFaults(t *testing.T) {
	transporttest.RunFaults(t, config(t))
}

// suiteURL is the subscriber URL of Watermill's suite: one message at a
// time, so that order is guaranteed without keys. With concurrency=1 a nack
// retries in place, so TestContinueAfterErrors's 100 nacks per subscriber
// all land on its first messages: retry forever (as watermill-sql does),
// with short delays.
const suiteURL = "mem://conformance?concurrency=1&drain_timeout=2s&retry_delay=10ms&max_retry_delay=10ms&max_attempts=-1&empty_delay=50ms"

func config(t *testing.T) transporttest.Config { return configURL(t, suiteURL) }

func configURL(t *testing.T, url string) transporttest.Config {
	open := func(t *testing.T, u string) (message.Publisher, message.Subscriber) {
		ctx := context.Background()
		pub, err := transport.OpenPublisher(ctx, "mem://conformance")
		if err != nil {
			t.Fatal(err)
		}
		sub, err := transport.OpenSubscriber(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		// Watermill's suite leaves some subscribers open; Close is
		// idempotent, so closing again at cleanup is safe.
		t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
		return pub, sub
	}
	broker := mem.NewBroker()
	return transporttest.Config{
		Features: tests.Features{
			ConsumerGroups:                      true,
			ExactlyOnceDelivery:                 false,
			GuaranteedOrder:                     true, // with concurrency=1 and no nacks
			GuaranteedOrderWithSingleSubscriber: true,
			Persistent:                          true,
		},
		NewPubSub: func(t *testing.T) (message.Publisher, message.Subscriber) { return open(t, url) },
		NewConsumerGroupPubSub: func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return open(t, url+"&consumer_group="+group)
		},
		NewPubSubWith: func(t *testing.T, p receiver.Config) (message.Publisher, message.Subscriber) {
			pub, err := mem.NewPublisher(mem.PublisherConfig{Broker: broker}, nil)
			if err != nil {
				t.Fatal(err)
			}
			sub, err := mem.NewSubscriber(mem.SubscriberConfig{Broker: broker, Pipeline: p, VisibilityTimeout: 3 * time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
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
}

// Publishers and subscribers name berth.mem for package telemetry, and a
// listener reports its topic and consumer group apart.
func TestMessagingSystemAndDestination(t *testing.T) {
	b := mem.NewBroker()
	pub, err := mem.NewPublisher(mem.PublisherConfig{Broker: b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := mem.NewSubscriber(mem.SubscriberConfig{Broker: b, ConsumerGroup: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if pub.MessagingSystem() != mem.MessagingSystem || sub.MessagingSystem() != mem.MessagingSystem {
		t.Errorf("MessagingSystem: publisher %q, subscriber %q, want %q", pub.MessagingSystem(), sub.MessagingSystem(), mem.MessagingSystem)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := sub.Subscribe(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	want := transport.Destination{System: mem.MessagingSystem, Name: "orders", ConsumerGroup: "billing"}
	states := sub.ListenerStates()
	if len(states) != 1 || states[0].Destination != want || states[0].Name != "orders/billing" {
		t.Errorf("ListenerStates = %+v, want orders/billing consuming %+v", states, want)
	}
}
