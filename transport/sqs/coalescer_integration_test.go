package sqs

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/testenv"
)

// On the emulator: concurrent single-message Publish calls with a linger
// share SendMessageBatch requests, and every message arrives once, intact.
func TestPublishLingerOnTheWire(t *testing.T) {
	var counter RequestCounter
	api := rawClient(t)
	topic := testenv.UniqueName("linger")
	url := createQueue(t, api, topic, nil)
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, &counter), PublishLinger: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const n = 40
	want := map[string]bool{}
	var wg sync.WaitGroup
	for i := range n {
		id := watermill.NewUUID()
		want[id] = true
		wg.Go(func() {
			m := message.NewMessage(id, []byte(strconv.Itoa(i)))
			m.Metadata.Set("k", "v"+strconv.Itoa(i))
			if err := pub.Publish(topic, m); err != nil {
				t.Errorf("publish %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if sends := counter.Count("SendMessageBatch") + counter.Count("SendMessage"); sends >= n {
		t.Errorf("%d send requests for %d concurrent calls: nothing shared (counts %v)", sends, n, counter.Counts())
	}
	for len(want) > 0 {
		got := receiveRaw(t, api, url, 30)
		if len(got) == 0 {
			t.Fatalf("%d messages missing", len(want))
		}
		for _, m := range got {
			msg, err := BerthCodec{}.Unmarshal(&m)
			if err != nil {
				t.Fatal(err)
			}
			if !want[msg.UUID] {
				t.Fatalf("unexpected or repeated message %s", msg.UUID)
			}
			if msg.Metadata.Get("k") != "v"+string(msg.Payload) {
				t.Errorf("message %s: metadata %v, payload %q", msg.UUID, msg.Metadata, msg.Payload)
			}
			delete(want, msg.UUID)
		}
	}
}

// On an emulated FIFO queue: groups publishing one message per call at
// once, through shared batches, keep each group's order.
func TestPublishLingerFIFOOrderOnTheWire(t *testing.T) {
	api := rawClient(t)
	topic := testenv.UniqueName("lingerfifo")
	pub, err := NewPublisher(PublisherConfig{
		Client:        clientConfig(t, nil),
		Queue:         QueueConfig{Create: true, FIFO: true},
		PublishLinger: 5 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const groups, each = 6, 15
	var wg sync.WaitGroup
	for g := range groups {
		wg.Go(func() {
			for i := range each {
				m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
				m.Metadata.Set(MetadataGroupID, "g"+strconv.Itoa(g))
				if err := pub.Publish(topic, m); err != nil {
					t.Errorf("group %d message %d: %v", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	ctx := context.Background()
	qu, err := api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(SanitizeName(topic, true))})
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	for total := 0; total < groups*each; {
		out, err := api.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: qu.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			t.Fatalf("only %d of %d messages", total, groups*each)
		}
		for _, m := range out.Messages {
			g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
			if body := aws.ToString(m.Body); body != strconv.Itoa(next[g]) {
				t.Fatalf("group %s: got %s when %d was next", g, body, next[g])
			}
			next[g]++
			total++
			// Deleted, so that the group's next messages are delivered.
			if _, err := api.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: qu.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(next) != groups {
		t.Errorf("%d groups received, want %d", len(next), groups)
	}
}

// Through SNS: concurrent single-message calls share PublishBatch requests
// and reach the subscribed queue.
func TestPublishLingerSNSOnTheWire(t *testing.T) {
	var counter RequestCounter
	topic := testenv.UniqueName("lingersns")
	queue := QueueConfig{Create: true}
	sub := newTestSubscriber(t, SubscriberConfig{Queue: queue, SNS: true})
	ch, err := sub.Subscribe(context.Background(), topic) // creates the topic, queue and subscription
	if err != nil {
		t.Fatal(err)
	}
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, &counter), Queue: queue, SNS: true, PublishLinger: 200 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// One publish first resolves the topic (CreateTopic, under the topics'
	// lock): the concurrent calls below then meet in the linger, not one
	// by one behind that lock on a loaded machine (CI saw 20 requests).
	if err := pub.Publish(topic, message.NewMessage("sns-warm", []byte("warm"))); err != nil {
		t.Fatal(err)
	}
	warm := counter.Count("PublishBatch")
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := pub.Publish(topic, message.NewMessage("sns-"+strconv.Itoa(i), []byte(strconv.Itoa(i)))); err != nil {
				t.Errorf("publish %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if batches := counter.Count("PublishBatch") - warm; batches >= n {
		t.Errorf("%d PublishBatch requests for %d concurrent calls: nothing shared", batches, n)
	}
	got := collect(t, ch, n+1, 30*time.Second)
	for i := range n {
		if got["sns-"+strconv.Itoa(i)] == nil {
			t.Errorf("message sns-%d not received", i)
		}
	}
}
