package sqs

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
)

// TestGroupsDeclared: groups declared on the publisher receive what was
// published before any of their subscribers ran; a group not declared
// does not (SNS semantics: a queue gets what is published after it is
// subscribed).
func TestGroupsDeclared(t *testing.T) {
	topic := testenv.UniqueName("declared")
	queue := QueueConfig{Create: true}
	pub, err := NewPublisher(PublisherConfig{
		Client: clientConfig(t, nil), Queue: queue, SNS: true,
		Groups: map[string][]string{topic: {"billing", "shipping"}, AllTopics: {"audit"}, "other": {"late"}},
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	var want []string
	for range 2 { // the first Publish declares, the second finds them declared
		msgs := []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("a")), message.NewMessage(watermill.NewUUID(), []byte("b"))}
		if err := pub.Publish(topic, msgs...); err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			want = append(want, m.UUID)
		}
	}
	if n := pub.Stats().NoSubscribers; n != 0 {
		t.Errorf("NoSubscribers = %d, want 0: the declared groups are subscribed", n)
	}
	slices.Sort(want)
	for _, group := range []string{"billing", "shipping", "audit"} {
		sub := newTestSubscriber(t, SubscriberConfig{Queue: queue, ConsumerGroup: group})
		ch, err := sub.Subscribe(t.Context(), topic)
		if err != nil {
			t.Fatal(err)
		}
		got := slices.Sorted(maps.Keys(collect(t, ch, len(want), 30*time.Second)))
		if !slices.Equal(got, want) {
			t.Errorf("group %s received %v, want %v", group, got, want)
		}
	}
}

// TestNoSubscribers: publishing through SNS to a topic without a
// subscription is counted and warned about once, costs one
// ListSubscriptionsByTopic per SubscriptionsTTL, and is refused with
// ErrNoSubscribers under RequireSubscribers; a subscription made in this
// process is seen by the next Publish.
func TestNoSubscribers(t *testing.T) {
	topic := testenv.UniqueName("nosubs")
	queue := QueueConfig{Create: true}
	var counter RequestCounter
	logger := watermill.NewCaptureLogger()
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, &counter), Queue: queue, SNS: true, SubscriptionsTTL: time.Minute}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	for range 3 {
		if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x")), message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	if n := pub.Stats().NoSubscribers; n != 6 {
		t.Errorf("NoSubscribers = %d, want 6", n)
	}
	if n := len(logger.Captured()[watermill.ErrorLogLevel]); n != 1 || !logger.HasError(ErrNoSubscribers) {
		t.Errorf("%d error logs (%v), want one warning with ErrNoSubscribers", n, logger.Captured())
	}
	if n := counter.Count("ListSubscriptionsByTopic"); n != 1 {
		t.Errorf("%d ListSubscriptionsByTopic requests for 3 publishes, want 1 (cached)", n)
	}

	strict, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: queue, SNS: true, RequireSubscribers: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = strict.Close() })
	err = strict.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x")))
	if !errors.Is(err, ErrNoSubscribers) {
		t.Fatalf("Publish with RequireSubscribers = %v, want ErrNoSubscribers", err)
	}
	if n := strict.Stats().NoSubscribers; n != 1 {
		t.Errorf("NoSubscribers = %d, want 1", n)
	}

	// A group subscribes in this process: both publishers see it at once,
	// within their TTL.
	sub := newTestSubscriber(t, SubscriberConfig{Queue: queue, ConsumerGroup: "g"})
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	m := message.NewMessage(watermill.NewUUID(), []byte("x"))
	if err := strict.Publish(topic, m); err != nil {
		t.Fatalf("Publish after a group subscribed: %v", err)
	}
	if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if n := pub.Stats().NoSubscribers; n != 6 {
		t.Errorf("NoSubscribers = %d after a group subscribed, want still 6", n)
	}
	ch, err := sub.Subscribe(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, ch, 2, 30*time.Second)
}

func TestGroupsConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   PublisherConfig
		field string
	}{
		{"groups without SNS", PublisherConfig{Groups: map[string][]string{"t": {"g"}}}, "Groups"},
		{"empty group", PublisherConfig{SNS: true, Groups: map[string][]string{"t": {""}}}, "Groups"},
		{"empty topic", PublisherConfig{SNS: true, Groups: map[string][]string{"": {"g"}}}, "Groups"},
		{"no groups", PublisherConfig{SNS: true, Groups: map[string][]string{"t": nil}}, "Groups"},
		{"require subscribers without SNS", PublisherConfig{RequireSubscribers: true}, "RequireSubscribers"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig naming %s", tc.name, err, tc.field)
		}
	}
	if err := (PublisherConfig{SNS: true, RequireSubscribers: true, Groups: map[string][]string{"*": {"a"}}}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

func TestGroupsURL(t *testing.T) {
	ctx := context.Background()
	p, err := transport.OpenPublisher(ctx, "sqs://test:test@127.0.0.1:1?region=us-east-1&sns=true&groups=orders:billing,orders:shipping,*:audit,a:b:c&require_subscribers=true&subscriptions_ttl=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := p.(*Publisher).cfg
	want := map[string][]string{"orders": {"billing", "shipping"}, "*": {"audit"}, "a:b": {"c"}}
	if !maps.EqualFunc(cfg.Groups, want, slices.Equal) || !cfg.RequireSubscribers || cfg.SubscriptionsTTL != 2*time.Second {
		t.Errorf("Groups %v, RequireSubscribers %t, SubscriptionsTTL %s", cfg.Groups, cfg.RequireSubscribers, cfg.SubscriptionsTTL)
	}
	for _, u := range []string{
		"sqs://127.0.0.1:1?sns=true&groups=orders",
		"sqs://127.0.0.1:1?sns=true&groups=orders:",
		"sqs://127.0.0.1:1?sns=true&groups=:g",
		"sqs://127.0.0.1:1?groups=orders:billing",
		"sqs://127.0.0.1:1?require_subscribers=true",
	} {
		if _, err := transport.OpenPublisher(ctx, u); !errors.Is(err, transport.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", u, err)
		}
	}
	// A subscriber accepts the publisher's parameters (one URL, both sides).
	s, err := transport.OpenSubscriber(ctx, "sqs://test:test@127.0.0.1:1?region=us-east-1&groups=orders:billing&require_subscribers=true")
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}
