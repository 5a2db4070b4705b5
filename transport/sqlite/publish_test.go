package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// A Publish to a known topic is one round trip (the INSERT): the topic's
// subscriptions are cached. A consumer group subscribed in this process is
// seen by the very next Publish.
func TestPublishOneRoundTripAndSeesNewGroups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "publish.db")
	pub, err := sqlite.NewPublisher(sqlite.PublisherConfig{DSN: path, SubscriptionsTTL: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := sqlite.NewSubscriber(subConfig(path, "billing"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize("orders"); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("orders", message.NewMessage("1", []byte("a"))); err != nil {
		t.Fatal(err)
	}
	before := pub.Stats().RoundTrips()
	for i := range 10 {
		if err := pub.Publish("orders", message.NewMessage(string(rune('b'+i)), []byte("b"))); err != nil {
			t.Fatal(err)
		}
	}
	if got := pub.Stats().RoundTrips() - before; got != 10 {
		t.Fatalf("10 Publish calls took %d round trips, want 10", got)
	}

	// A new group, subscribed in-process after the cache was filled.
	sub2, err := sqlite.NewSubscriber(subConfig(path, "shipping"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	ch, err := sub2.Subscribe(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("orders", message.NewMessage("new", []byte("n"))); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		if m.UUID != "new" {
			t.Fatalf("got %s, want the message published after subscribing", m.UUID)
		}
		m.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("the new consumer group did not receive the next Publish")
	}
}

// Publishers and subscribers name their messaging system for package
// telemetry, and each listener reports its topic and consumer group
// apart.
func TestMessagingSystemAndDestination(t *testing.T) {
	path := filepath.Join(t.TempDir(), "system.db")
	pub, err := sqlite.NewPublisher(sqlite.PublisherConfig{DSN: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := sqlite.NewSubscriber(subConfig(path, "billing"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if got := pub.MessagingSystem(); got != sqlite.MessagingSystem {
		t.Errorf("publisher MessagingSystem() = %q, want %q", got, sqlite.MessagingSystem)
	}
	if got := sub.MessagingSystem(); got != sqlite.MessagingSystem {
		t.Errorf("subscriber MessagingSystem() = %q, want %q", got, sqlite.MessagingSystem)
	}
	if got := sqlqueue.MessagingSystem(sqlite.Dialect{}); got != sqlite.MessagingSystem {
		t.Errorf("sqlqueue.MessagingSystem(sqlite.Dialect{}) = %q, want %q", got, sqlite.MessagingSystem)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := sub.Subscribe(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	want := transport.Destination{System: sqlite.MessagingSystem, Name: "orders", ConsumerGroup: "billing"}
	states := sub.ListenerStates()
	if len(states) != 1 || states[0].Destination != want || states[0].Name != "orders/billing" {
		t.Errorf("ListenerStates = %+v, want orders/billing consuming %+v", states, want)
	}
}
