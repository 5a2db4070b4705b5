package sqs

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
	"weak"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// createQueue creates a fresh queue and returns its URL.
func createQueue(t *testing.T, api *awssqs.Client, name string, attrs map[string]string) string {
	t.Helper()
	out, err := api.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

func sendRaw(t *testing.T, api *awssqs.Client, url, body string, attrs map[string]types.MessageAttributeValue) string {
	t.Helper()
	out, err := api.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

// receiveRaw polls url once (1s long poll) as another consumer would.
func receiveRaw(t *testing.T, api *awssqs.Client, url string, visibility int32) []types.Message {
	t.Helper()
	out, err := api.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: visibility,
		MessageAttributeNames: []string{"All"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Messages
}

func newTestSubscriber(t *testing.T, cfg SubscriberConfig) *Subscriber {
	t.Helper()
	if cfg.Client.Endpoint == "" {
		cfg.Client = clientConfig(t, nil)
	}
	if cfg.WaitTime == 0 {
		cfg.WaitTime = time.Second
	}
	sub, err := NewSubscriber(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("no message within 20s")
	}
	return nil
}

// TestBodyReleasedAfterMap: once the pipeline drops Delivery.Raw after Map,
// nothing the transport keeps (handle, delivery, mapped message) retains the
// SQS body string.
func TestBodyReleasedAfterMap(t *testing.T) {
	api := rawClient(t)
	name := testenv.UniqueName("body")
	url := createQueue(t, api, name, nil)
	sendRaw(t, api, url, strings.Repeat("x", 64<<10), nil)

	src := newSource(api, &queue{name: name, url: url, maxSize: 1 << 20}, nil, SubscriberConfig{}.WithDefaults(), watermill.NopLogger{})
	defer src.Close(context.Background())
	// Claim until the message shows up (the emulator may answer a long poll
	// empty around a send).
	var ds []*transport.Delivery
	deadline := time.Now().Add(60 * time.Second)
	for len(ds) == 0 {
		var err error
		ds, err = src.Claim(context.Background(), 10)
		if err != nil || len(ds) > 1 || time.Now().After(deadline) {
			t.Fatalf("claim: %d deliveries, %v", len(ds), err)
		}
	}
	d := ds[0]
	body := weak.Make(unsafe.StringData(d.Raw.(*rawMessage).body))
	msg, err := src.Map(d)
	if err != nil {
		t.Fatal(err)
	}
	d.Raw = nil // what the pipeline does after a successful Map
	waitUntil(t, 5*time.Second, "the body to be collected", func() bool {
		runtime.GC()
		return body.Value() == nil
	})
	if len(msg.Payload) != 64<<10 {
		t.Fatalf("payload %d bytes", len(msg.Payload))
	}
	if err := src.Complete(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(d)
}

// TestHeartbeatKeepsLongHandlerInvisible: a handler running past the
// visibility timeout keeps its message; no other consumer gets it meanwhile.
func TestHeartbeatKeepsLongHandlerInvisible(t *testing.T) {
	api := rawClient(t)
	topic := testenv.UniqueName("hb")
	url := createQueue(t, api, topic, nil)
	sub := newTestSubscriber(t, SubscriberConfig{VisibilityTimeout: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	sendRaw(t, api, url, "long job", nil)
	msg := next(t, ch)
	// Hold the message for three visibility timeouts while another consumer
	// polls the queue; each poll waits up to 1s.
	held := time.Now()
	for time.Since(held) < 6*time.Second {
		if got := receiveRaw(t, api, url, 30); len(got) > 0 {
			t.Fatalf("another consumer received %q %s after the handler started", aws.ToString(got[0].Body), time.Since(held))
		}
	}
	msg.Ack()
	waitUntil(t, 10*time.Second, "the ack to delete the message", func() bool {
		out, err := api.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessages},
		})
		return err == nil && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0" && out.Attributes["ApproximateNumberOfMessages"] == "0"
	})
}

// TestCloseReleasesPrefetched: closing a subscriber makes the messages it
// had claimed but not delivered visible at once.
func TestCloseReleasesPrefetched(t *testing.T) {
	api := rawClient(t)
	topic := testenv.UniqueName("rel")
	url := createQueue(t, api, topic, nil)
	for i := range 6 {
		sendRaw(t, api, url, strconv.Itoa(i), nil)
	}
	sub := newTestSubscriber(t, SubscriberConfig{
		VisibilityTimeout: time.Minute,
		Pipeline:          receiver.Config{Concurrency: 1, BufferSize: 8, DrainTimeout: time.Second},
	})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	msg := next(t, ch)
	waitUntil(t, 10*time.Second, "the rest to be prefetched", func() bool {
		ls := sub.Listeners()
		return len(ls) == 1 && ls[0].State().Buffered == 5
	})
	msg.Ack()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	// With a one-minute visibility timeout, only a release makes them
	// available now.
	got := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 5 && time.Now().Before(deadline) {
		for _, m := range receiveRaw(t, api, url, 30) {
			got[aws.ToString(m.Body)] = true
		}
	}
	if len(got) != 5 || got[string(msg.Payload)] {
		if resp, err := http.Get(testenv.SQSEndpoint(t) + "/_fauxqs/queues/" + topic); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("fauxqs: %s", b)
		}
		t.Fatalf("another consumer got %v after close, want the 5 undelivered messages", got)
	}
}

// TestUndecodableGoesToDeadLetterQueue: a message whose attributes cannot
// be decoded goes to the dead-letter queue with a reason, and the loop goes
// on with the next message.
func TestUndecodableGoesToDeadLetterQueue(t *testing.T) {
	api := rawClient(t)
	topic := testenv.UniqueName("bad")
	dlqName := testenv.UniqueName("dlq")
	url := createQueue(t, api, topic, nil)
	dlqURL := createQueue(t, api, dlqName, nil)
	sendRaw(t, api, url, "poison", map[string]types.MessageAttributeValue{AttributeMetadata: strAttr("{not json")})
	sendRaw(t, api, url, "good", nil)

	sub := newTestSubscriber(t, SubscriberConfig{Queue: QueueConfig{DeadLetterQueue: dlqName}, Pipeline: receiver.Config{Concurrency: 1}})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	msg := next(t, ch)
	if string(msg.Payload) != "good" {
		t.Fatalf("got %q, want the good message", msg.Payload)
	}
	msg.Ack()
	var dead []types.Message
	waitUntil(t, 10*time.Second, "the dead letter", func() bool {
		dead = append(dead, receiveRaw(t, api, dlqURL, 30)...)
		return len(dead) > 0
	})
	info := aws.ToString(dead[0].MessageAttributes[AttributeDeadLetter].StringValue)
	if aws.ToString(dead[0].Body) != "poison" || !strings.Contains(info, "undecodable") || !strings.Contains(info, topic) {
		t.Fatalf("dead letter body %q, info %s", aws.ToString(dead[0].Body), info)
	}
	if _, ok := dead[0].MessageAttributes[AttributeMetadata]; !ok {
		t.Error("the original attributes were not kept")
	}
}

// TestForeignMessage: a message another tool sent, without Berth's
// attributes, is handled: its UUID is the SQS message id and its attributes
// are metadata.
func TestForeignMessage(t *testing.T) {
	api := rawClient(t)
	topic := testenv.UniqueName("foreign")
	url := createQueue(t, api, topic, nil)
	id := sendRaw(t, api, url, `{"order":1}`, map[string]types.MessageAttributeValue{
		"source": strAttr("cli"),
		"count":  {DataType: aws.String("Number"), StringValue: aws.String("3")},
		"blob":   {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2}},
	})
	sub := newTestSubscriber(t, SubscriberConfig{})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	msg := next(t, ch)
	defer msg.Ack()
	if msg.UUID != id || string(msg.Payload) != `{"order":1}` {
		t.Fatalf("got %s %q, want %s", msg.UUID, msg.Payload, id)
	}
	for k, v := range map[string]string{"source": "cli", "count": "3", "blob": "AQI=", MetadataSQSMessageID: id, MetadataReceiveCount: "1"} {
		if msg.Metadata.Get(k) != v {
			t.Errorf("metadata %s = %q, want %q", k, msg.Metadata.Get(k), v)
		}
	}
	if msg.Metadata.Get(MetadataSentTimestamp) == "" {
		t.Error("no sent timestamp")
	}
}

// TestPublishBatches: one Publish of n messages sends ceil(n/10)
// SendMessageBatch requests, and never more than 10 attributes a message.
func TestPublishBatches(t *testing.T) {
	var counter RequestCounter
	api := rawClient(t)
	topic := testenv.UniqueName("pub")
	url := createQueue(t, api, topic, nil)
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, &counter)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	msgs := make([]*message.Message, 25)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		for k := range 15 {
			msgs[i].Metadata.Set("k"+strconv.Itoa(k), "v")
		}
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	if n := counter.Count("SendMessageBatch"); n != 3 {
		t.Errorf("%d SendMessageBatch requests for 25 messages, want 3 (counts %v)", n, counter.Counts())
	}
	seen := 0
	for seen < 25 {
		got := receiveRaw(t, api, url, 30)
		if len(got) == 0 {
			t.Fatalf("only %d of 25 messages", seen)
		}
		for _, m := range got {
			if len(m.MessageAttributes) > MaxAttributes {
				t.Fatalf("%d attributes", len(m.MessageAttributes))
			}
		}
		seen += len(got)
	}
}

// TestPublishTooLarge: a message over the queue's MaximumMessageSize is
// rejected with ErrMessageTooLarge naming the limit; the others are sent.
func TestPublishTooLarge(t *testing.T) {
	topic := testenv.UniqueName("big")
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: QueueConfig{Create: true, MaximumMessageSize: 1024}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	big := message.NewMessage("big", make([]byte, 2048))
	err = pub.Publish(topic, message.NewMessage("small", []byte("ok")), big)
	if !errors.Is(err, transport.ErrMessageTooLarge) || !strings.Contains(err.Error(), "1024") || !strings.Contains(err.Error(), "big") {
		t.Fatalf("err = %v, want ErrMessageTooLarge naming 1024 and the message", err)
	}
	if strings.Contains(err.Error(), "small") {
		t.Fatalf("the small message failed too: %v", err)
	}
}

// TestQueueNotFound: without Create, a missing queue is ErrQueueNotFound.
func TestQueueNotFound(t *testing.T) {
	topic := testenv.UniqueName("missing")
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(topic, message.NewMessage("x", nil)); !errors.Is(err, transport.ErrQueueNotFound) {
		t.Errorf("publish: %v, want ErrQueueNotFound", err)
	}
	sub := newTestSubscriber(t, SubscriberConfig{})
	if _, err := sub.Subscribe(context.Background(), topic); !errors.Is(err, transport.ErrQueueNotFound) {
		t.Errorf("subscribe: %v, want ErrQueueNotFound", err)
	}
}
