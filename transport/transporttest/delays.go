package transporttest

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// Delays says how precisely a transport honours delays, for RunDelays.
type Delays struct {
	// SubSecond: a 1500ms delay is delivered in [1.5s, 2.4s) (SQL, mem).
	// Without it, delays are rounded up to whole seconds (SQS's
	// DelaySeconds) and only the lower bound is checked.
	SubSecond bool
}

// RunDelays checks that Watermill's components/delay is honoured: a message
// with delay.Message(delay.For(2s)), or published through delay.NewPublisher
// with delay.WithContext, is not received before 1.9s; a 1500ms delay is
// received in [1.5s, 2.4s) (SubSecond); a malformed delay metadata value
// fails Publish with transport.ErrInvalidMessage naming the key; a message
// received after a 500ms delay and published again at once with its
// metadata (as components/requeuer does) is not delayed a second time. It
// uses c.NewPubSubWith.
func RunDelays(t *testing.T, c Config, d Delays) {
	if c.NewPubSubWith == nil {
		t.Fatal("transporttest: Config.NewPubSubWith is required")
	}
	t.Run("Message", func(t *testing.T) {
		t.Parallel()
		testDelay(t, c, 2*time.Second, 1900*time.Millisecond, 0, func(pub message.Publisher, tp string, m *message.Message) error {
			delay.Message(m, delay.For(2*time.Second))
			return pub.Publish(tp, m)
		})
	})
	t.Run("Context", func(t *testing.T) {
		t.Parallel()
		testDelay(t, c, 2*time.Second, 1900*time.Millisecond, 0, func(pub message.Publisher, tp string, m *message.Message) error {
			dp, err := delay.NewPublisher(pub, delay.PublisherConfig{})
			if err != nil {
				return err
			}
			m.SetContext(delay.WithContext(context.Background(), delay.For(2*time.Second)))
			return dp.Publish(tp, m)
		})
	})
	t.Run("SubSecond", func(t *testing.T) {
		t.Parallel()
		upper := time.Duration(0)
		if d.SubSecond {
			upper = 2400 * time.Millisecond
		}
		testDelay(t, c, 1500*time.Millisecond, 1500*time.Millisecond, upper, func(pub message.Publisher, tp string, m *message.Message) error {
			delay.Message(m, delay.For(1500*time.Millisecond))
			return pub.Publish(tp, m)
		})
	})
	t.Run("PublishedAgain", func(t *testing.T) {
		t.Parallel()
		testPublishedAgain(t, c)
	})
	t.Run("Malformed", func(t *testing.T) {
		t.Parallel()
		pub, sub := c.NewPubSubWith(t, fastRetry(receiver.Config{}))
		defer closeAll(t, pub, sub)
		tp := topic(t)
		initialize(t, sub, tp)
		for _, kv := range [][2]string{{delay.DelayedForKey, "two seconds"}, {delay.DelayedUntilKey, "tomorrow"}} {
			m := message.NewMessage(watermill.NewUUID(), []byte("x"))
			m.Metadata.Set(kv[0], kv[1])
			err := pub.Publish(tp, m)
			if !errors.Is(err, transport.ErrInvalidMessage) {
				t.Errorf("%s=%q: Publish = %v, want transport.ErrInvalidMessage", kv[0], kv[1], err)
				continue
			}
			if !strings.Contains(err.Error(), kv[0]) {
				t.Errorf("%s=%q: %v does not name the key", kv[0], kv[1], err)
			}
		}
	})
}

// testDelay publishes one message with publish and checks that it is
// received no sooner than lower and, when upper is set, sooner than upper
// after Publish was called (the delay counts from a moment inside the call:
// a first publish that creates tables may take longer than the margin).
func testDelay(t *testing.T, c Config, want, lower, upper time.Duration, publish func(message.Publisher, string, *message.Message) error) {
	pub, sub := c.NewPubSubWith(t, fastRetry(receiver.Config{}))
	defer closeAll(t, pub, sub)
	tp := topic(t)
	ch, cancel := subscribe(t, sub, tp)
	defer cancel()
	m := message.NewMessage(watermill.NewUUID(), []byte("delayed"))
	called := time.Now()
	if err := publish(pub, tp, m); err != nil {
		t.Fatalf("publish: %v", err)
	}
	returned := time.Now()
	got := receive(t, ch)
	at := time.Now()
	got.Ack()
	if got.UUID != m.UUID {
		t.Fatalf("got %s, want %s", got.UUID, m.UUID)
	}
	t.Logf("delay %s: received %s after Publish was called (the call took %s)", want, at.Sub(called), returned.Sub(called))
	if e := at.Sub(called); e < lower {
		t.Errorf("delay %s: received %s after Publish was called, want ≥ %s", want, e, lower)
	}
	if e := at.Sub(called); upper > 0 && e >= upper {
		t.Errorf("delay %s: received %s after Publish was called, want < %s", want, e, upper)
	}
}

// testPublishedAgain publishes a message with delay.For(500ms), receives
// it, and publishes it again at once to another topic with the metadata it
// came with, as a requeuer does: the second publish must not delay it
// again. Watermill's until has whole seconds, so a due time read from
// until and for alone would take the second publish's now+for as the
// delay just set (internal/delaymeta, rule 3) and wait 500ms more.
func testPublishedAgain(t *testing.T, c Config) {
	const d = 500 * time.Millisecond
	pub, sub := c.NewPubSubWith(t, fastRetry(receiver.Config{}))
	defer closeAll(t, pub, sub)
	first, second := topic(t), topic(t)
	ch1, cancel1 := subscribe(t, sub, first)
	defer cancel1()
	ch2, cancel2 := subscribe(t, sub, second)
	defer cancel2()
	m := message.NewMessage(watermill.NewUUID(), []byte("requeued"))
	delay.Message(m, delay.For(d))
	called := time.Now()
	if err := pub.Publish(first, m); err != nil {
		t.Fatalf("publish: %v", err)
	}
	got := receive(t, ch1)
	if e := time.Since(called); e < d {
		t.Errorf("first publish: received %s after Publish was called, want ≥ %s", e, d)
	}
	got.Ack()
	again := message.NewMessage(watermill.NewUUID(), got.Payload)
	maps.Copy(again.Metadata, got.Metadata)
	called = time.Now()
	if err := pub.Publish(second, again); err != nil {
		t.Fatalf("publish again: %v", err)
	}
	back := receive(t, ch2)
	e := time.Since(called)
	back.Ack()
	t.Logf("published again: received %s after Publish was called", e)
	if e >= d {
		t.Errorf("published again right after its delay of %s passed: received %s after Publish, want < %s (delayed twice)", d, e, d)
	}
}
