package sqs

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/berth-go/berth/internal/guard/guardtest"
	"github.com/berth-go/berth/internal/testenv"
)

// A subscriber whose logger panics on every call keeps running through a
// queue deleted under it (receive errors, re-creation) and through the
// source's own logging (a dead letter left to the redrive policy, logged at
// debug level): the process stays up and later messages are delivered.
func TestSourceSurvivesPanickingLogger(t *testing.T) {
	topic := testenv.UniqueName("guard")
	missing := missingQueue{ch: make(chan error, 1)}
	logger := &guardtest.PanicLogger{}
	cfg := SubscriberConfig{
		Client:   clientConfig(t, nil),
		Queue:    QueueConfig{Create: true},
		WaitTime: time.Second,
	}
	cfg.Pipeline.Observer = missing
	cfg.Pipeline.ErrorBackoff = 10 * time.Millisecond
	cfg.Pipeline.MaxAttempts = 1 // a nack dead-letters at once
	sub, err := NewSubscriber(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: QueueConfig{Create: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	// The source logs a dead letter without a dead-letter queue.
	if err := pub.Publish(topic, message.NewMessage("nacked", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	receive(t, ch, "nacked").Nack()
	waitUntil(t, 30*time.Second, "the dead letter's log line", func() bool {
		return logger.Count("Dead letter left to the queue's redrive policy") >= 1
	})

	// Receive errors: the queue is deleted under the subscriber.
	api := rawClient(t)
	url, err := api.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(cfg.Queue.name(topic))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: url.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-missing.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the deleted queue was never reported")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := pub.Publish(topic, message.NewMessage("after-delete", []byte("x")))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish after re-creation: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the re-creation races this publish
	}
	// The dead-lettered message stays in the queue (no redrive policy) and
	// may come round again before the queue is deleted: skip it.
	for {
		select {
		case m := <-ch:
			if m.UUID == "nacked" {
				m.Nack()
				continue
			}
			if m.UUID != "after-delete" {
				t.Fatalf("got %s, want after-delete", m.UUID)
			}
			m.Ack()
			return
		case <-time.After(30 * time.Second):
			t.Fatal("no message after-delete")
		}
	}
}

// receive returns the next message, which must be uuid.
func receive(t *testing.T, ch <-chan *message.Message, uuid string) *message.Message {
	t.Helper()
	select {
	case m := <-ch:
		if m.UUID != uuid {
			t.Fatalf("got %s, want %s", m.UUID, uuid)
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("no message %s", uuid)
		return nil
	}
}
