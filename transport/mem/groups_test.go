package mem_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport/mem"
)

// receive subscribes a subscriber of group to topic and acks n messages,
// failing t when they do not arrive within 10s; it returns their UUIDs.
func receive(t *testing.T, b *mem.Broker, group, topic string, n int) map[string]int {
	t.Helper()
	sub, err := mem.NewSubscriber(mem.SubscriberConfig{Broker: b, ConsumerGroup: group}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for got := range n {
		select {
		case m := <-ch:
			seen[m.UUID]++
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("group %q received %d of %d", group, got, n)
		}
	}
	return seen
}

// Messages published to a topic with no consumer group and no default
// reader are parked: consumer groups created later (by Subscribe or
// SubscribeInitialize) receive them, then a default reader; after that
// nothing is parked.
func TestParkedReachLaterGroups(t *testing.T) {
	b := mem.NewBroker()
	pub, err := mem.NewPublisher(mem.PublisherConfig{Broker: b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if err := pub.Publish("orders", message.NewMessage(fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	if p := pub.ParkedMessages(); p != 30 {
		t.Fatalf("ParkedMessages = %d, want 30", p)
	}
	if s := b.Stats("orders", ""); s.Parked != 30 || s.Ready != 30 {
		t.Fatalf("default queue %+v, want 30 parked and ready", s)
	}
	if s := b.Stats("orders", "nobody"); s != (mem.Stats{}) {
		t.Fatalf("Stats of a group that never registered = %+v, want zero (Stats registers nothing)", s)
	}
	if n := len(receive(t, b, "billing", "orders", 30)); n != 30 {
		t.Fatalf("billing: %d distinct, want 30", n)
	}
	b.Ensure("orders", "shipping") // SubscribeInitialize's path
	if s := b.Stats("orders", "shipping"); s.Ready != 30 {
		t.Fatalf("shipping after Ensure: %+v, want 30 ready", s)
	}
	if n := len(receive(t, b, "shipping", "orders", 30)); n != 30 {
		t.Fatalf("shipping: %d distinct, want 30", n)
	}
	if n := len(receive(t, b, "", "orders", 30)); n != 30 {
		t.Fatalf("default reader: %d distinct, want 30", n)
	}
	if err := pub.Publish("orders", message.NewMessage("after", nil)); err != nil {
		t.Fatal(err)
	}
	if p := pub.ParkedMessages(); p != 30 {
		t.Errorf("ParkedMessages = %d after a publish to a read topic, want 30", p)
	}
	for _, g := range []string{"billing", "shipping", ""} {
		if s := b.Stats("orders", g); s.Ready != 1 {
			t.Errorf("group %q: %+v, want the one new message", g, s)
		}
	}
}

// Once a consumer group exists, nothing is parked: a group created later
// gets only what is published after it, and an unread default queue keeps
// nothing.
func TestNothingParkedOnceAGroupExists(t *testing.T) {
	b := mem.NewBroker()
	b.Ensure("t", "first")
	b.Publish("t", message.NewMessage("1", nil))
	b.Ensure("t", "second")
	b.Publish("t", message.NewMessage("2", nil))
	for g, want := range map[string]int{"first": 2, "second": 1, "": 0} {
		if s := b.Stats("t", g); s.Ready != want || s.Parked != 0 {
			t.Errorf("group %q: %+v, want %d ready, none parked", g, s, want)
		}
	}
}
