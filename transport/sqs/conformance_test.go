package sqs

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport/transporttest"
)

// conformance builds the transporttest constructors for one queue flavour.
func conformance(t *testing.T, queue QueueConfig, sns bool, pipeline receiver.Config) transporttest.Config {
	queue.Create = true
	queue.DeadLetterQueue = testenv.UniqueName("dlq")
	dl := &deadLetters{api: rawClient(t), name: queue.DeadLetterQueue}
	if queue.FIFO {
		dl.name += ".fifo"
	}
	build := func(t *testing.T, group string, p receiver.Config) (message.Publisher, message.Subscriber) {
		pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: queue, SNS: sns}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		sub, err := NewSubscriber(SubscriberConfig{
			Client:            clientConfig(t, nil),
			Queue:             queue,
			Pipeline:          p,
			ConsumerGroup:     group,
			SNS:               sns,
			WaitTime:          time.Second, // keeps Close quick; the cost is not measured here
			VisibilityTimeout: 10 * time.Second,
		}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
		return pub, sub
	}
	defaultGroup := ""
	if sns {
		// Without a subscribed queue SNS drops messages; the plain
		// constructor consumes through a default group.
		defaultGroup = "default"
	}
	c := transporttest.Config{
		NewPubSub: func(t *testing.T) (message.Publisher, message.Subscriber) {
			return build(t, defaultGroup, pipeline)
		},
		NewPubSubWith: func(t *testing.T, p receiver.Config) (message.Publisher, message.Subscriber) {
			return build(t, defaultGroup, p)
		},
		DeadLetters: func(t *testing.T, topic string) []transporttest.DeadLetter {
			name := queue.name(topic)
			if defaultGroup != "" {
				name = queue.name(topic + "-" + defaultGroup)
			}
			return dl.list(t, name)
		},
	}
	if sns {
		c.NewConsumerGroupPubSub = func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return build(t, group, pipeline)
		}
	}
	return c
}

func TestConformanceStandard(t *testing.T) {
	c := conformance(t, QueueConfig{}, false, receiver.Config{})
	c.Features = tests.Features{
		ConsumerGroups:      false,
		ExactlyOnceDelivery: false,
		GuaranteedOrder:     false,
		Persistent:          true,
	}
	c.Unordered = true          // a standard queue keeps no order
	c.WholeSecondRetries = true // visibility timeouts are whole seconds
	transporttest.Run(t, c)
}

// TestConformanceFIFO runs Watermill's suite only: with one message group
// per topic (the default), SQS FIFO keeps the group locked while any of its
// messages is in flight, so Berth's behaviours that hold several messages
// un-acked and expect more to flow (QueueCountAndStatus, UnackedLimit,
// CloseLosesNothing) cannot hold by design.
func TestConformanceFIFO(t *testing.T) {
	// One handler at a time. (Per-group dispatch keeps the order at any
	// Concurrency, but with one group per topic nothing runs in parallel
	// anyway, and the emulator returns one message per group per receive.)
	// A nack
	// makes the message invisible for its retry delay and SQS keeps the
	// whole group locked meanwhile. Visibility timeouts are whole seconds,
	// so any positive delay (10ms included) stalls the group at least 1s
	// per nack, and Watermill's TestContinueAfterErrors nacks one group 300
	// times in a row: 5 minutes with a 10ms delay. A negative RetryDelay
	// (visibility 0: redeliver at once) is what FIFO users who retry in
	// place want, and takes the test to seconds.
	// Prefetched messages released by each closing subscriber count as
	// receives too, so the redrive policy's maxReceiveCount (20 by default)
	// would move messages this test nacks ~6 times and re-reads through
	// four subscribers to the DLQ; lift it for the suite.
	c := conformance(t, QueueConfig{FIFO: true, MaxReceiveCount: 1000}, false, receiver.Config{
		Concurrency: 1, RetryDelay: -1, MaxAttempts: -1,
	})
	c.Features = tests.Features{
		ConsumerGroups:                      false,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
	}
	tests.TestPubSub(t, c.Features, c.NewPubSub, nil)
}

// TestConformanceSNS runs the whole kit over SNS fan-out: every consumer
// group's queue is subscribed to the topic (the kit initializes topics before
// publishing, since SNS drops messages published while no queue is
// subscribed).
func TestConformanceSNS(t *testing.T) {
	c := conformance(t, QueueConfig{}, true, receiver.Config{})
	c.Features = tests.Features{
		ConsumerGroups:      true,
		ExactlyOnceDelivery: false,
		GuaranteedOrder:     false,
		Persistent:          true,
	}
	c.Unordered = true          // standard queues subscribed to the topic keep no order
	c.WholeSecondRetries = true // visibility timeouts are whole seconds
	transporttest.Run(t, c)
}

// TestFaults injects a panic at every pipeline point over a standard queue:
// each is recorded, reported, rebuilt, and nothing is lost (a message whose
// settlement panicked returns after its visibility timeout).
func TestFaults(t *testing.T) {
	transporttest.RunFaults(t, conformance(t, QueueConfig{}, false, receiver.Config{}))
}
