package sqs

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport/transporttest"
)

// TestDelays: Watermill's delay metadata becomes DelaySeconds on standard
// queues, rounded up to whole seconds (a 1500ms delay is received after
// 2s, never before 1.5s).
func TestDelays(t *testing.T) {
	transporttest.RunDelays(t, conformance(t, QueueConfig{}, false, receiver.Config{}), transporttest.Delays{})
}

// TestDelayUnsupported: a delay SQS cannot honour fails Publish with
// ErrDelayUnsupported naming the message and the limit, and the message is
// not sent; the other messages of the call are.
func TestDelayUnsupported(t *testing.T) {
	cases := []struct {
		name  string
		cfg   PublisherConfig
		delay time.Duration
		want  string
	}{
		{"over 15 minutes", PublisherConfig{}, 16 * time.Minute, "limit of 15m0s"},
		{"FIFO queue", PublisherConfig{Queue: QueueConfig{FIFO: true}}, 2 * time.Second, "FIFO queue"},
		{"SNS", PublisherConfig{SNS: true}, 2 * time.Second, "SNS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Client = clientConfig(t, nil)
			cfg.Queue.Create = true
			pub, err := NewPublisher(cfg, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close() })
			topic := testenv.UniqueName("delay")
			var sub *Subscriber
			if !cfg.SNS {
				sub = newTestSubscriber(t, SubscriberConfig{Queue: cfg.Queue})
			} else {
				sub = newTestSubscriber(t, SubscriberConfig{Queue: cfg.Queue, ConsumerGroup: "g"})
			}
			if err := sub.SubscribeInitialize(topic); err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{1, 2} { // SendMessage, then a batch
				msgs := make([]*message.Message, n)
				for i := range msgs {
					msgs[i] = message.NewMessage(watermill.NewUUID(), []byte("x"))
				}
				delayed := msgs[0]
				delay.Message(delayed, delay.For(tc.delay))
				err := pub.Publish(topic, msgs...)
				if !errors.Is(err, ErrDelayUnsupported) {
					t.Fatalf("%d messages: Publish = %v, want ErrDelayUnsupported", n, err)
				}
				if !strings.Contains(err.Error(), delayed.UUID) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%q does not name the message %s and %q", err, delayed.UUID, tc.want)
				}
				if n == 2 {
					ch, err := sub.Subscribe(t.Context(), topic)
					if err != nil {
						t.Fatal(err)
					}
					got := collect(t, ch, 1, 30*time.Second)
					if _, ok := got[msgs[1].UUID]; !ok {
						t.Fatalf("received %v, want the undelayed %s", got, msgs[1].UUID)
					}
				}
			}
		})
	}
}
