package compat

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	wmsns "github.com/ThreeDotsLabs/watermill-aws/sns"
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqs"
)

// These tests run the real github.com/ThreeDotsLabs/watermill-aws v1.0.1
// publishers and subscribers against the emulator, next to Berth's with
// sqs.WatermillAWSCodec. Queues are created beforehand, so neither library
// creates any.

// watermillAWSSQS returns watermill-aws's SQS client settings for the
// emulator.
func watermillAWSSQS(t *testing.T) (aws.Config, []func(*awssqs.Options)) {
	c := clientConfig(t)
	return *c.AWS, []func(*awssqs.Options){func(o *awssqs.Options) { o.BaseEndpoint = aws.String(c.Endpoint) }}
}

func newWatermillAWSPublisher(t *testing.T) *wmsqs.Publisher {
	t.Helper()
	cfg, opts := watermillAWSSQS(t)
	pub, err := wmsqs.NewPublisher(wmsqs.PublisherConfig{AWSConfig: cfg, OptFns: opts, DoNotCreateQueueIfNotExists: true}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// watermillAWSSubscribe consumes queue with watermill-aws's subscriber and
// sends what arrives, acked, to the returned channel. The subscriber is
// closed at cleanup.
func watermillAWSSubscribe(t *testing.T, queue string) <-chan *message.Message {
	t.Helper()
	cfg, opts := watermillAWSSQS(t)
	sub, err := wmsqs.NewSubscriber(wmsqs.SubscriberConfig{AWSConfig: cfg, OptFns: opts, DoNotCreateQueueIfNotExists: true}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, queue)
	if err != nil {
		cancel()
		_ = sub.Close()
		t.Fatal(err)
	}
	out := make(chan *message.Message, 100)
	var wg sync.WaitGroup
	wg.Go(func() {
		// Its subscriber waits for each message to be acked before it
		// receives the next and returns from Close; ack at once.
		for m := range ch {
			m.Ack()
			select {
			case out <- m:
			default:
				t.Errorf("more messages than expected: %s", m.UUID)
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		_ = sub.Close()
		wg.Wait()
	})
	return out
}

// collect receives n messages from ch within d, keyed by UUID, acking them.
func collect(t *testing.T, ch <-chan *message.Message, n int, d time.Duration) map[string]*message.Message {
	t.Helper()
	got := make(map[string]*message.Message, n)
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for len(got) < n {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %d of %d messages", len(got), n)
			}
			m.Ack()
			if _, dup := got[m.UUID]; dup {
				t.Errorf("message %s received twice", m.UUID)
			}
			got[m.UUID] = m
		case <-timeout.C:
			t.Fatalf("received %d of %d messages within %s", len(got), n, d)
		}
	}
	return got
}

// berthDeliveryKeys are the metadata keys a Berth subscriber adds.
var berthDeliveryKeys = map[string]bool{
	sqs.MetadataSQSMessageID: true, sqs.MetadataReceiveCount: true, sqs.MetadataSentTimestamp: true,
	transport.MetadataAttempt: true, transport.MetadataMessageID: true,
}

// sameMessage compares a received message with the one sent: UUID, payload
// and metadata equal, apart from the keys the receiver adds (extra).
func sameMessage(t *testing.T, got map[string]*message.Message, want *message.Message, wantMeta message.Metadata, extra map[string]bool) {
	t.Helper()
	m := got[want.UUID]
	if m == nil {
		t.Errorf("message %s not received", want.UUID)
		return
	}
	if string(m.Payload) != string(want.Payload) {
		t.Errorf("%s: payload %q, want %q", want.UUID, m.Payload, want.Payload)
	}
	gotMeta := maps.Clone(m.Metadata)
	for k := range extra {
		if _, ok := gotMeta[k]; !ok && k != sqs.MetadataSentTimestamp {
			t.Errorf("%s: no %s in metadata", want.UUID, k)
		}
		delete(gotMeta, k)
	}
	if !maps.Equal(gotMeta, wantMeta) {
		t.Errorf("%s: metadata %q, want %q", want.UUID, gotMeta, wantMeta)
	}
}

// TestWatermillAWSPublisherToBerthSubscriber: what watermill-aws's
// publisher sends, a Berth subscriber with sqs.WatermillAWSCodec reads with the
// same UUID, payload and metadata; a message a Berth publisher not yet
// switched sends to the same queue in Berth's format is read too.
func TestWatermillAWSPublisherToBerthSubscriber(t *testing.T) {
	api := rawClient(t)
	topic := testenv.UniqueName("wm_to_berth")
	createQueue(t, api, topic, nil)

	sent := []*message.Message{
		newMsg("wm-plain", []byte(`{"order":1}`), "correlation_id", "c-1"),
		newMsg("wm-unicode", []byte("żółw ✓ 日本語"), "name", "Zoë ✓ 日本語", "emoji", "🚀"),
		newMsg("wm-nine-keys", []byte("x"), manyKeys(9)...),
		newMsg("wm-no-metadata", []byte("tabs\tand\nnewlines")),
	}
	if err := newWatermillAWSPublisher(t).Publish(topic, sent...); err != nil {
		t.Fatal(err)
	}
	berthFormat := newMsg("berth-format", []byte{0, 0xff, 'b'}, manyKeys(15)...)
	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: clientConfig(t)}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(topic, berthFormat); err != nil {
		t.Fatal(err)
	}

	sub := newTestSubscriber(t, sqs.SubscriberConfig{Codec: sqs.WatermillAWSCodec{}})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, ch, len(sent)+1, 30*time.Second)
	for _, m := range append(sent, berthFormat) {
		sameMessage(t, got, m, m.Metadata, berthDeliveryKeys)
	}
}

// TestBerthPublisherToWatermillAWSSubscriber: what a Berth publisher opened
// with codec=watermill-aws sends, watermill-aws's subscriber reads with the
// same UUID, payload and metadata; what the format cannot carry is refused
// with ErrInvalidMessage and not sent.
func TestBerthPublisherToWatermillAWSSubscriber(t *testing.T) {
	api := rawClient(t)
	topic := testenv.UniqueName("berth_to_wm")
	url := createQueue(t, api, topic, nil)

	endpoint := strings.TrimPrefix(testenv.SQSEndpoint(t), "http://")
	pub, err := transport.OpenPublisher(context.Background(),
		"sqs://"+testenv.SQSAccessKeyID+":"+testenv.SQSSecretAccessKey+"@"+endpoint+"?region="+testenv.DefaultSQSRegion+"&codec=watermill-aws")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	forwarded := newMsg("forwarded", []byte("x"), "k", "v",
		sqs.MetadataSQSMessageID, "old-id", sqs.MetadataReceiveCount, "2", transport.MetadataAttempt, "2")
	good := []*message.Message{
		newMsg("plain", []byte(`{"order":1}`), "correlation_id", "c-1"),
		newMsg("unicode", []byte("żółw ✓ 日本語"), "name", "Zoë ✓ 日本語", "emoji", "🚀"),
		newMsg("nine-keys", []byte("x"), manyKeys(9)...),
		newMsg("control-characters", []byte("x"), "ctrl", "a\x00b", "utf8", "\xff\xfe"),
		forwarded,
	}
	bad := []*message.Message{
		newMsg("ten-keys", []byte("x"), manyKeys(10)...),
		newMsg("binary", []byte{0xff, 0}),
		newMsg("empty", nil),
	}
	err = pub.Publish(topic, append(append([]*message.Message{}, bad...), good...)...)
	if !errors.Is(err, transport.ErrInvalidMessage) {
		t.Fatalf("Publish: %v, want ErrInvalidMessage", err)
	}
	for _, m := range bad {
		if !strings.Contains(err.Error(), "publish "+m.UUID+" ") {
			t.Errorf("the error does not name %s: %v", m.UUID, err)
		}
	}
	for _, m := range good {
		if strings.Contains(err.Error(), "publish "+m.UUID+" ") {
			t.Errorf("the error names %s, which was sent", m.UUID)
		}
	}

	got := collect(t, watermillAWSSubscribe(t, topic), len(good), 30*time.Second)
	for _, m := range good {
		want := m.Metadata
		if m == forwarded {
			want = message.Metadata{"k": "v"}
		}
		sameMessage(t, got, m, want, nil)
	}
	// The refused messages were never sent: the queue ends empty (the
	// subscriber fails the test if it gets more).
	waitUntil(t, 30*time.Second, "an empty queue", func() bool { return queueDepth(t, api, url) == 0 })
}

// queueDepth is the number of visible and in-flight messages in a queue.
func queueDepth(t *testing.T, api *awssqs.Client, url string) int {
	t.Helper()
	out, err := api.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range out.Attributes {
		i, _ := strconv.Atoi(v)
		n += i
	}
	return n
}

// TestWatermillAWSCodecThroughSNS: an SNS topic with two consumer groups,
// one read by watermill-aws's subscriber and one by Berth's, fed by
// watermill-aws's SNS publisher and by Berth's SNS publisher: every
// consumer reads both messages the same (raw message delivery on both
// sides, so no SNS envelope).
func TestWatermillAWSCodecThroughSNS(t *testing.T) {
	client := clientConfig(t)
	topic := testenv.UniqueName("wm_sns")
	queue := sqs.QueueConfig{Create: true}

	// Berth's group subscriber creates the SNS topic and both groups'
	// queues and subscriptions.
	berthSub := newTestSubscriber(t, sqs.SubscriberConfig{Client: client, Queue: queue, ConsumerGroup: "berth", Codec: sqs.WatermillAWSCodec{}})
	if err := berthSub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	wmGroup := newTestSubscriber(t, sqs.SubscriberConfig{Client: client, Queue: queue, ConsumerGroup: "wm"})
	if err := wmGroup.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	_ = wmGroup.Close() // only its queue and subscription were wanted

	snsAPI := awssns.NewFromConfig(*client.AWS, func(o *awssns.Options) { o.BaseEndpoint = aws.String(client.Endpoint) })
	arn, err := snsAPI.CreateTopic(context.Background(), &awssns.CreateTopicInput{Name: aws.String(topic)}) // idempotent
	if err != nil {
		t.Fatal(err)
	}
	wmPub, err := wmsns.NewPublisher(wmsns.PublisherConfig{
		AWSConfig:                   *client.AWS,
		OptFns:                      []func(*awssns.Options){func(o *awssns.Options) { o.BaseEndpoint = aws.String(client.Endpoint) }},
		TopicResolver:               wmsns.TransparentTopicResolver{},
		DoNotCreateTopicIfNotExists: true,
		Marshaler:                   topicArnMarshaler{},
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	fromWM := newMsg("from-watermill-aws", []byte(`{"via":"watermill-aws"}`), "name", "Zoë ✓", "correlation_id", "c-1")
	if err := wmPub.Publish(aws.ToString(arn.TopicArn), fromWM); err != nil {
		t.Fatal(err)
	}
	berthPub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client, Queue: queue, SNS: true, Codec: sqs.WatermillAWSCodec{}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer berthPub.Close()
	fromBerth := newMsg("from-berth", []byte(`{"via":"berth"}`), "name", "Zoë ✓", "ctrl", "\x01")
	if err := berthPub.Publish(topic, fromBerth); err != nil {
		t.Fatal(err)
	}

	ch, err := berthSub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, ch, 2, 30*time.Second)
	gotWM := collect(t, watermillAWSSubscribe(t, sqs.SanitizeName(topic+"-wm", false)), 2, 30*time.Second)
	for _, m := range []*message.Message{fromWM, fromBerth} {
		sameMessage(t, got, m, m.Metadata, berthDeliveryKeys)
		sameMessage(t, gotWM, m, m.Metadata, nil)
	}
}

// TestWatermillAWSCodecDeadLetter: a Berth subscriber with
// sqs.WatermillAWSCodec dead-letters in watermill-aws's format, so a
// watermill-aws consumer of the dead-letter queue reads the message with
// its UUID, payload and metadata, and the reason in berth_dead_letter.
func TestWatermillAWSCodecDeadLetter(t *testing.T) {
	api := rawClient(t)
	topic := testenv.UniqueName("wm_dead")
	dlq := testenv.UniqueName("wm_dlq")
	createQueue(t, api, topic, nil)
	createQueue(t, api, dlq, nil)

	msg := newMsg("doomed", []byte("payload"), "correlation_id", "c-1", "name", "Zoë ✓")
	if err := newWatermillAWSPublisher(t).Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	sub := newTestSubscriber(t, sqs.SubscriberConfig{
		Codec:    sqs.WatermillAWSCodec{},
		Queue:    sqs.QueueConfig{DeadLetterQueue: dlq},
		Pipeline: receiver.Config{MaxAttempts: 1},
	})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch).Nack()

	dead := collect(t, watermillAWSSubscribe(t, dlq), 1, 30*time.Second)[msg.UUID]
	if dead == nil {
		t.Fatalf("dead letter %s not received", msg.UUID)
	}
	var info struct {
		Reason string `json:"reason"`
		Queue  string `json:"queue"`
	}
	if err := json.Unmarshal([]byte(dead.Metadata.Get(sqs.AttributeDeadLetter)), &info); err != nil || info.Reason == "" || info.Queue != topic {
		t.Errorf("%s = %q (%v), want the reason and queue %s", sqs.AttributeDeadLetter, dead.Metadata.Get(sqs.AttributeDeadLetter), err, topic)
	}
	delete(dead.Metadata, sqs.AttributeDeadLetter)
	sameMessage(t, map[string]*message.Message{dead.UUID: dead}, msg, msg.Metadata, nil)
}

// topicArnMarshaler is watermill-aws's SNS marshaler with the topic in
// TopicArn instead of TargetArn: SNS takes either, fauxqs 1.9.2 only
// TopicArn. The attributes are watermill-aws's own.
type topicArnMarshaler struct {
	wmsns.DefaultMarshalerUnmarshaler
}

func (m topicArnMarshaler) Marshal(arn wmsns.TopicArn, msg *message.Message) *awssns.PublishInput {
	in := m.DefaultMarshalerUnmarshaler.Marshal(arn, msg)
	in.TopicArn, in.TargetArn = in.TargetArn, nil
	return in
}
