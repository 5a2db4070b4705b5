package sqs

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
)

// TestBadInput sends messages as other tools would (plain SendMessage, no
// Berth attributes, odd attribute types, corrupt Berth attributes) and
// checks that each is either handled or dead-lettered with a reason, and
// that the loop keeps running: a valid message sent after them through
// Berth is delivered.
func TestBadInput(t *testing.T) {
	api := rawClient(t)
	topic := testenv.UniqueName("bad-input")
	dlq := topic + "-dlq"
	queue := QueueConfig{Create: true, DeadLetterQueue: dlq, MaxReceiveCount: -1}
	sub := newTestSubscriber(t, SubscriberConfig{Queue: queue})
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	qurl, err := api.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(SanitizeName(topic, false))})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(qurl.QueueUrl)
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}

	type input struct {
		key   string // also the body, so the test can find it
		attrs map[string]types.MessageAttributeValue
		dead  bool
		check func(*message.Message) error
	}
	inputs := []input{
		{key: "plain send, no attributes"},
		{key: "number attribute", attrs: map[string]types.MessageAttributeValue{
			"price": {DataType: aws.String("Number"), StringValue: aws.String("12.5")}},
			check: func(m *message.Message) error { return want(m.Metadata.Get("price"), "12.5") }},
		{key: "binary attribute", attrs: map[string]types.MessageAttributeValue{
			"blob": {DataType: aws.String("Binary"), BinaryValue: []byte{0xff, 0}}},
			check: func(m *message.Message) error { return want(m.Metadata.Get("blob"), "/wA=") }},
		{key: "custom string type", attrs: map[string]types.MessageAttributeValue{
			"kind": {DataType: aws.String("String.json"), StringValue: aws.String(`{"a":1}`)}},
			check: func(m *message.Message) error { return want(m.Metadata.Get("kind"), `{"a":1}`) }},
		{key: "uuid attribute only", attrs: map[string]types.MessageAttributeValue{AttributeUUID: str("given-uuid")},
			check: func(m *message.Message) error { return want(m.UUID, "given-uuid") }},
		// (fauxqs rejects characters above U+FFFD, which SQS accepts.)
		{key: "unicode ✓ \u00e9 \u4e2d", check: func(m *message.Message) error { return want(string(m.Payload), "unicode ✓ \u00e9 \u4e2d") }},
		{key: "berth_meta not json", attrs: map[string]types.MessageAttributeValue{AttributeMetadata: str("{not json")}, dead: true},
		{key: "berth_meta wrong type", attrs: map[string]types.MessageAttributeValue{AttributeMetadata: str(`{"a":1}`)}, dead: true},
		{key: "berth_meta array", attrs: map[string]types.MessageAttributeValue{AttributeMetadata: str(`["a"]`)}, dead: true},
		{key: "berth_meta null", attrs: map[string]types.MessageAttributeValue{AttributeMetadata: str(`null`)}},
		{key: "berth_body base64 but not base64 !!", attrs: map[string]types.MessageAttributeValue{AttributeBodyEncoding: str("base64")}, dead: true},
		{key: "berth_body unknown encoding", attrs: map[string]types.MessageAttributeValue{AttributeBodyEncoding: str("gzip")}, dead: true},
	}
	for _, in := range inputs {
		sendRaw(t, api, url, in.key, in.attrs)
	}

	var mu sync.Mutex
	got := map[string]*message.Message{}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for m := range ch {
			mu.Lock()
			got[string(m.Payload)] = m
			mu.Unlock()
			m.Ack()
		}
	}()

	// Through Berth after the bad ones: a payload that is not valid UTF-8
	// (sent base64-encoded) and metadata that is not valid UTF-8 either.
	pub, err := NewPublisher(PublisherConfig{Client: clientConfig(t, nil), Queue: queue}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	binary := []byte{0xff, 0xfe, 0, 'v', 'a', 'l', 'i', 'd'}
	after := message.NewMessage("valid-after", binary)
	after.Metadata.Set("bad\xffkey", "bad\xfevalue")
	if err := pub.Publish(topic, after); err != nil {
		t.Fatal(err)
	}
	big := message.NewMessage("too-big", bytes.Repeat([]byte("x"), 1<<20+1))
	if err := pub.Publish(topic, big); !errors.Is(err, transport.ErrMessageTooLarge) {
		t.Fatalf("oversize publish: err = %v, want ErrMessageTooLarge", err)
	}
	waitUntil(t, 30*time.Second, "the valid message after the bad ones", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got[string(binary)] != nil
	})

	dl := &deadLetters{api: api, name: dlq}
	wantDead := 0
	for _, in := range inputs {
		if in.dead {
			wantDead++
		}
	}
	var dead []string
	waitUntil(t, 30*time.Second, "the dead letters", func() bool {
		dead = dead[:0]
		dl.list(t, SanitizeName(topic, false))
		for _, r := range dl.seen {
			dead = append(dead, r.reason)
		}
		return len(dead) >= wantDead
	})
	if len(dead) != wantDead {
		t.Errorf("%d dead letters, want %d", len(dead), wantDead)
	}
	for _, r := range dead {
		if !strings.Contains(r, ErrUndecodable.Error()) {
			t.Errorf("dead-letter reason %q does not say the message is undecodable", r)
		}
		t.Logf("dead-lettered: %s", r)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, in := range inputs {
		m := got[in.key]
		switch {
		case in.dead && m != nil:
			t.Errorf("%q: handled, want dead-lettered", in.key)
		case !in.dead && m == nil:
			t.Errorf("%q: not handled", in.key)
		case !in.dead && in.check != nil:
			if err := in.check(m); err != nil {
				t.Errorf("%q: %v", in.key, err)
			}
		}
	}
}

func want(got, want string) error {
	if got != want {
		return errors.New("got " + got + ", want " + want)
	}
	return nil
}
