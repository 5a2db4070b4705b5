package sqs

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/testenv"
)

// A Watermill UUID that is not SQS text (invalid UTF-8, control
// characters) travels as a Binary attribute and arrives unchanged.
func TestNonTextUUIDArrivesUnchanged(t *testing.T) {
	topic := testenv.UniqueName("uuid")
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: QueueConfig{Create: true}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := NewSubscriber(SubscriberConfig{Client: clientConfig(t, nil), Queue: QueueConfig{Create: true}, WaitTime: time.Second}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	const id = "bad\xd7\x01id"
	if err := pub.Publish(topic, message.NewMessage(id, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		if m.UUID != id {
			t.Fatalf("uuid %q, want %q", m.UUID, id)
		}
		m.Ack()
	case <-time.After(30 * time.Second):
		t.Fatal("no message")
	}
}
