package sqs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
)

type missingQueue struct {
	transport.NopObserver
	ch chan error
}

func (m missingQueue) WaveDone(_ string, _, _, _ int, err error) {
	if errors.Is(err, transport.ErrQueueNotFound) {
		select {
		case m.ch <- err:
		default:
		}
	}
}

// A queue deleted under a running subscriber is reported distinctly
// (ErrQueueNotFound) and, with Create on, created again; the loop keeps
// running and later messages are delivered.
func TestDeletedQueueIsReportedAndRecreated(t *testing.T) {
	topic := testenv.UniqueName("gone")
	missing := missingQueue{ch: make(chan error, 1)}
	cfg := SubscriberConfig{
		Client:   clientConfig(t, nil),
		Queue:    QueueConfig{Create: true},
		WaitTime: time.Second,
	}
	cfg.Pipeline.Observer = missing
	cfg.Pipeline.ErrorBackoff = 10 * time.Millisecond
	sub, err := NewSubscriber(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	api := rawClient(t)
	url, err := api.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(cfg.Queue.name(topic))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: url.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-missing.ch:
		t.Logf("reported: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the deleted queue was never reported")
	}
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: QueueConfig{Create: true}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
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
	select {
	case m := <-ch:
		if m.UUID != "after-delete" {
			t.Fatalf("got %s", m.UUID)
		}
		m.Ack()
	case <-time.After(30 * time.Second):
		t.Fatalf("no message after re-creation; states %+v", sub.ListenerStates())
	}
}
