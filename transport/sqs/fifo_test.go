package sqs

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// batchAPI answers ReceiveMessage with scripted batches, as real SQS may:
// several messages of one message group in one batch. The emulator
// (fauxqs 1.9.2) never does that — it returns at most one message per group
// per ReceiveMessage — so the pipeline's per-group dispatch is pinned here,
// at the API seam. It records deletes and visibility changes.
type batchAPI struct {
	API // unused methods: nil, they panic

	mu      sync.Mutex
	batches [][]types.Message
	deleted []string
	changed []visibility // receipt and timeout of every visibility change
}

func (a *batchAPI) GetQueueUrl(_ context.Context, in *awssqs.GetQueueUrlInput, _ ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error) {
	return &awssqs.GetQueueUrlOutput{QueueUrl: aws.String("https://sqs.invalid/1/" + aws.ToString(in.QueueName))}, nil
}

func (a *batchAPI) GetQueueAttributes(context.Context, *awssqs.GetQueueAttributesInput, ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error) {
	return &awssqs.GetQueueAttributesOutput{Attributes: map[string]string{
		string(types.QueueAttributeNameFifoQueue): "true",
		string(types.QueueAttributeNameQueueArn):  "arn:aws:sqs:us-east-1:1:q.fifo",
	}}, nil
}

func (a *batchAPI) ReceiveMessage(ctx context.Context, _ *awssqs.ReceiveMessageInput, _ ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	a.mu.Lock()
	if len(a.batches) > 0 {
		b := a.batches[0]
		a.batches = a.batches[1:]
		a.mu.Unlock()
		return &awssqs.ReceiveMessageOutput{Messages: b}, nil
	}
	a.mu.Unlock()
	select { // an empty long poll
	case <-ctx.Done():
	case <-time.After(20 * time.Millisecond):
	}
	return &awssqs.ReceiveMessageOutput{}, nil
}

func (a *batchAPI) DeleteMessageBatch(_ context.Context, in *awssqs.DeleteMessageBatchInput, _ ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := &awssqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		a.deleted = append(a.deleted, aws.ToString(e.ReceiptHandle))
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func (a *batchAPI) ChangeMessageVisibilityBatch(_ context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, _ ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := &awssqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		a.changed = append(a.changed, visibility{receipt: aws.ToString(e.ReceiptHandle), timeout: e.VisibilityTimeout})
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// changes returns the visibility timeouts set on receipt, in order.
func (a *batchAPI) changes(receipt string) []int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []int32
	for _, c := range a.changed {
		if c.receipt == receipt {
			out = append(out, c.timeout)
		}
	}
	return out
}

// fifoMessage is message id (also its body and receipt handle) of group g.
func fifoMessage(id, g string) types.Message {
	return types.Message{
		MessageId: aws.String(id), ReceiptHandle: aws.String(id), Body: aws.String(id),
		Attributes: map[string]string{
			string(types.MessageSystemAttributeNameMessageGroupId):          g,
			string(types.MessageSystemAttributeNameApproximateReceiveCount): "1",
		},
	}
}

// TestFIFOOneMessagePerGroupInFlight: one ReceiveMessage returns a1, a2,
// a3 of group a and b1 of group b. The pipeline hands out a1 and b1 at
// once, a2 only after a1's ack, keeps a3 renewed while it waits, and when
// a2 is nacked it releases a3 (visibility 0) instead of handling it, so a3
// never overtakes a2's retry. With ordered_nack=dead_letter, the nacked
// message is dead-lettered (here: left to the redrive policy) and a3 is
// released as well.
func TestFIFOOneMessagePerGroupInFlight(t *testing.T) {
	for _, mode := range []receiver.OrderedNack{receiver.OrderedNackBlock, receiver.OrderedNackDeadLetter} {
		t.Run(string(mode), func(t *testing.T) {
			api := &batchAPI{batches: [][]types.Message{{
				fifoMessage("a1", "a"), fifoMessage("a2", "a"), fifoMessage("a3", "a"), fifoMessage("b1", "b"),
			}}}
			sub, err := NewSubscriber(SubscriberConfig{
				Client:            ClientConfig{SQS: api},
				Queue:             QueueConfig{FIFO: true},
				WaitTime:          time.Second,
				VisibilityTimeout: time.Second, // renewed every 700ms
				Pipeline:          receiver.Config{Concurrency: 4, OrderedNack: mode},
			}, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			ch, err := sub.Subscribe(context.Background(), "orders")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]*message.Message{}
			for range 2 {
				m := next(t, ch)
				got[string(m.Payload)] = m
			}
			if got["a1"] == nil || got["b1"] == nil {
				t.Fatalf("first delivered %v; want a1 and b1", slices.Sorted(maps.Keys(got)))
			}
			got["b1"].Ack()
			waitUntil(t, 10*time.Second, "a3 renewed while it waits", func() bool { return slices.Contains(api.changes("a3"), 1) })
			select {
			case m := <-ch:
				t.Fatalf("%s delivered while a1 is in flight", m.Payload)
			default:
			}
			got["a1"].Ack()
			a2 := next(t, ch)
			if string(a2.Payload) != "a2" {
				t.Fatalf("after a1's ack got %s, want a2", a2.Payload)
			}
			a2.Nack()
			waitUntil(t, 10*time.Second, "a3 released", func() bool {
				c := api.changes("a3")
				return len(c) > 0 && c[len(c)-1] == 0
			})
			select {
			case m := <-ch:
				t.Fatalf("%s delivered after a2's nack; a3 must be handed back", m.Payload)
			case <-time.After(100 * time.Millisecond):
			}
			c := api.changes("a2")
			switch {
			case len(c) == 0:
				t.Fatal("a2 was not settled")
			case mode == receiver.OrderedNackBlock && c[len(c)-1] < 1:
				t.Fatalf("a2's visibility set to %d; want its retry delay (≥ 1s)", c[len(c)-1])
			case mode == receiver.OrderedNackDeadLetter && c[len(c)-1] != 0:
				// No dead-letter queue: dead-lettering leaves it to the
				// queue's redrive policy (visibility 0).
				t.Fatalf("a2's visibility set to %d; want 0 (dead-lettered to the redrive policy)", c[len(c)-1])
			}
		})
	}
}

// On a FIFO queue, a message's berth_ordering_key is its MessageGroupId
// unless berth_sqs_group_id is set; without either, the topic is.
func TestFIFOOrderingKeyIsTheGroup(t *testing.T) {
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: QueueConfig{Create: true, FIFO: true}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	topic := testenv.UniqueName("groups")
	keyed := message.NewMessage(watermill.NewUUID(), []byte("keyed"))
	keyed.Metadata.Set(transport.MetadataOrderingKey, "order-42")
	both := message.NewMessage(watermill.NewUUID(), []byte("both"))
	both.Metadata.Set(transport.MetadataOrderingKey, "order-42")
	both.Metadata.Set(MetadataGroupID, "explicit")
	plain := message.NewMessage(watermill.NewUUID(), []byte("plain"))
	for _, m := range []*message.Message{keyed, both, plain} {
		if err := pub.Publish(topic, m); err != nil {
			t.Fatal(err)
		}
	}
	api := rawClient(t)
	url, err := api.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(SanitizeName(topic, true))})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"keyed": "order-42", "both": "explicit", "plain": topic}
	got := map[string]string{}
	waitUntil(t, 20*time.Second, "the three messages", func() bool {
		out, err := api.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
			QueueUrl: url.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			got[aws.ToString(m.Body)] = m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		}
		return len(got) == 3
	})
	if !maps.Equal(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
}
