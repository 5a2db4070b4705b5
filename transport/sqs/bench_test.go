package sqs

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
)

// BenchmarkConsumeBacklog consumes a 1,000-message backlog per iteration and
// reports API requests per published and per consumed message, counted by a
// RequestCounter:
//
//	go test -run '^$' -bench ConsumeBacklog ./transport/sqs/
func BenchmarkConsumeBacklog(b *testing.B) {
	const n = 1000
	api := rawClient(b)
	var pubCount, subCount RequestCounter
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(b, &pubCount), Queue: QueueConfig{Create: true}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	var consumed, elapsed time.Duration
	_ = consumed
	for b.Loop() {
		b.StopTimer()
		topic := testenv.UniqueName("bench")
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			b.Fatal(err)
		}
		url := aws.ToString(must(api.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})).QueueUrl)
		sub, err := NewSubscriber(SubscriberConfig{
			Client:   clientConfig(b, &subCount),
			Pipeline: receiver.Config{Concurrency: 16},
		}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		ch, err := sub.Subscribe(context.Background(), topic)
		if err != nil {
			b.Fatal(err)
		}
		for range n {
			(<-ch).Ack()
		}
		// Wait for the last deletes (through the uncounted client).
		for {
			out, err := api.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
				QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessagesNotVisible},
			})
			if err != nil {
				b.Fatal(err)
			}
			if out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0" {
				break
			}
			time.Sleep(5 * time.Millisecond) // polling an external system, not synchronising goroutines
		}
		elapsed += time.Since(start)
		b.StopTimer()
		_ = sub.Close()
		b.StartTimer()
	}
	iters := float64(b.N)
	// Queue resolution (GetQueueUrl, GetQueueAttributes) is per process, not per message.
	sub := float64(subCount.Count("ReceiveMessage") + subCount.Count("DeleteMessageBatch") + subCount.Count("ChangeMessageVisibilityBatch"))
	b.ReportMetric(sub/(iters*n), "requests/consumed")
	b.ReportMetric(float64(subCount.Count("ReceiveMessage"))/(iters*n), "receives/consumed")
	b.ReportMetric(float64(subCount.Count("DeleteMessageBatch"))/(iters*n), "deletes/consumed")
	b.ReportMetric(float64(pubCount.Count("SendMessageBatch"))/(iters*n), "requests/published")
	b.ReportMetric(iters*n/elapsed.Seconds(), "msgs/s")
	b.Logf("subscriber requests: %v", subCount.Counts())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
