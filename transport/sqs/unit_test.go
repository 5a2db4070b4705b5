package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

func TestEncodeNeverExceedsTenAttributes(t *testing.T) {
	for _, n := range []int{0, 1, 8, 9, 10, 11, 50} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			msg := message.NewMessage("uuid-1", []byte("hello"))
			for i := range n {
				msg.Metadata.Set(fmt.Sprintf("key%02d", i), fmt.Sprintf("value%d", i))
			}
			msg.Metadata.Set("bad name!", "x") // not a valid attribute name
			msg.Metadata.Set("empty", "")      // SQS rejects empty values
			msg.Metadata.Set(MetadataGroupID, "g")
			e, err := encode(msg)
			if err != nil {
				t.Fatal(err)
			}
			if len(e.attrs) > MaxAttributes {
				t.Fatalf("%d attributes, limit %d", len(e.attrs), MaxAttributes)
			}
			if _, ok := e.attrs[MetadataGroupID]; ok {
				t.Errorf("%s sent as an attribute", MetadataGroupID)
			}
			d, err := decode(e.body, e.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if d.uuid != "uuid-1" || string(d.payload) != "hello" {
				t.Errorf("got uuid %q payload %q", d.uuid, d.payload)
			}
			want := map[string]string{"bad name!": "x", "empty": ""}
			for i := range n {
				want[fmt.Sprintf("key%02d", i)] = fmt.Sprintf("value%d", i)
			}
			if len(d.metadata) != len(want) {
				t.Errorf("got %d metadata keys, want %d: %v", len(d.metadata), len(want), d.metadata)
			}
			for k, v := range want {
				if got, ok := d.metadata[k]; !ok || got != v {
					t.Errorf("metadata %q = %q, %v; want %q", k, got, ok, v)
				}
			}
		})
	}
}

func TestEncodeBinaryPayload(t *testing.T) {
	payload := []byte{0xff, 0x00, 0x01, 'a'}
	e, err := encode(message.NewMessage("u", payload))
	if err != nil {
		t.Fatal(err)
	}
	if !validText([]byte(e.body)) {
		t.Fatalf("body %q is not valid SQS text", e.body)
	}
	d, err := decode(e.body, e.attrs)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.payload) != string(payload) {
		t.Fatalf("payload %v, want %v", d.payload, payload)
	}
}

func TestDecodeUndecodable(t *testing.T) {
	cases := map[string]map[string]types.MessageAttributeValue{
		"bad meta json": {AttributeMetadata: strAttr("{not json")},
		"bad encoding":  {AttributeBodyEncoding: strAttr("rot13")},
		"bad base64":    {AttributeBodyEncoding: strAttr("base64")},
		"unknown type":  {"x": {DataType: aws.String("Weird"), StringValue: aws.String("1")}},
	}
	for name, attrs := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := decode("!!not base64!!", attrs); !errors.Is(err, ErrUndecodable) {
				t.Fatalf("err = %v, want ErrUndecodable", err)
			}
		})
	}
}

func TestSanitizeName(t *testing.T) {
	cases := []struct {
		topic string
		fifo  bool
		want  string // exact, or prefix when ending in "*"
	}{
		{"orders", false, "orders"},
		{"orders", true, "orders.fifo"},
		{"orders.fifo", true, "orders.fifo"},
		{"orders.created", false, "orders_created-*"},
		{strings.Repeat("a", 80), false, strings.Repeat("a", 80)},
		{strings.Repeat("a", 81), false, strings.Repeat("a", 71) + "-*"},
		{strings.Repeat("a", 80), true, strings.Repeat("a", 66) + "-*"},
		{"", false, "-*"},
	}
	for _, c := range cases {
		got := SanitizeName(c.topic, c.fifo)
		if strings.HasSuffix(c.want, "*") {
			if !strings.HasPrefix(got, strings.TrimSuffix(c.want, "*")) {
				t.Errorf("SanitizeName(%q, %v) = %q, want prefix %q", c.topic, c.fifo, got, c.want)
			}
		} else if got != c.want {
			t.Errorf("SanitizeName(%q, %v) = %q, want %q", c.topic, c.fifo, got, c.want)
		}
		if len(got) > 80 {
			t.Errorf("SanitizeName(%q) = %q: %d characters", c.topic, got, len(got))
		}
	}
	if SanitizeName("a.b", false) == SanitizeName("a_b", false) {
		t.Error("distinct topics a.b and a_b share a queue name")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (SubscriberConfig{}).Validate(); err != nil {
		t.Fatalf("zero SubscriberConfig: %v", err)
	}
	if err := (PublisherConfig{}).Validate(); err != nil {
		t.Fatalf("zero PublisherConfig: %v", err)
	}
	err := SubscriberConfig{
		WaitTime:          time.Minute,
		VisibilityTimeout: 13 * time.Hour,
		Queue:             QueueConfig{MaximumMessageSize: 10},
		Pipeline:          receiver.Config{Concurrency: -1},
	}.Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"WaitTime", "VisibilityTimeout", "Queue.MaximumMessageSize", "Pipeline: Concurrency"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
}

func TestOpenURLRejectsBadParameters(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{
		"sqs://127.0.0.1:1?bogus=1",
		"sqs://127.0.0.1:1?wait_time=forever",
		"sqs://127.0.0.1:1?endpoint=http://x:1",
		"sqs://127.0.0.1:1/some/path",
		"sqs://127.0.0.1:1?ordered_nack=skip",
	} {
		if _, err := transport.OpenSubscriber(ctx, u); !errors.Is(err, transport.ErrInvalidConfig) {
			t.Errorf("OpenSubscriber(%s) = %v, want ErrInvalidConfig", u, err)
		}
	}
	// A publisher checks the subscriber's parameters it ignores.
	if _, err := transport.OpenPublisher(ctx, "sqs://127.0.0.1:1?wait_time=forever"); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("publisher accepted wait_time=forever: %v", err)
	}
}

// fakeDeleter fails chosen entries of DeleteMessageBatch once.
type fakeDeleter struct {
	API      // unused methods panic
	mu       sync.Mutex
	failOnce map[string]bool // receipt → fail with InternalError on first try
	deleted  map[string]int
	requests int
}

func (f *fakeDeleter) DeleteMessageBatch(_ context.Context, in *awssqs.DeleteMessageBatchInput, _ ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	out := &awssqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		r := aws.ToString(e.ReceiptHandle)
		switch {
		case r == "gone":
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"), SenderFault: true})
		case f.failOnce[r]:
			delete(f.failOnce, r)
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), SenderFault: false})
		default:
			f.deleted[r]++
			out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
		}
	}
	return out, nil
}

func TestDeleteBatchRetriesPartialFailures(t *testing.T) {
	f := &fakeDeleter{failOnce: map[string]bool{"r3": true, "r7": true}, deleted: map[string]int{}}
	b := newBatcher(deleteSender(f, "q"), time.Hour, 3, maxBatch) // only full batches or Close flush
	var wg sync.WaitGroup
	errs := make([]error, 11)
	for i := range 10 {
		wg.Go(func() { errs[i] = b.Do(context.Background(), "r"+strconv.Itoa(i)) })
	}
	// Ten entries make a full batch at once, and r3 and r7 are sent again.
	waitUntil(t, 5*time.Second, "the full batch and its retry", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.deleted) == 10
	})
	// The eleventh waits for the Close flush (the interval is an hour).
	wg.Go(func() { errs[10] = b.Do(context.Background(), "gone") })
	waitUntil(t, 5*time.Second, "the eleventh entry to queue", func() bool {
		return b.Queued() == 1
	})
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := range 10 {
		if errs[i] != nil && !errors.Is(errs[i], transport.ErrLeaseLost) {
			t.Errorf("entry %d: %v", i, errs[i])
		}
	}
	lost := 0
	for _, err := range errs {
		if errors.Is(err, transport.ErrLeaseLost) {
			lost++
		}
	}
	if lost != 1 {
		t.Errorf("%d entries reported lease lost, want 1 (the invalid handle)", lost)
	}
	for i := range 10 {
		if n := f.deleted["r"+strconv.Itoa(i)]; n != 1 {
			t.Errorf("r%d deleted %d times, want 1", i, n)
		}
	}
	// 1 full batch + 1 retry of r3/r7 + the close flush of the eleventh.
	if f.requests != 3 {
		t.Errorf("%d DeleteMessageBatch requests, want 3", f.requests)
	}
	if err := settleErr(b.Do(context.Background(), "late")); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Do after Close = %v, want transport.ErrClosed", err)
	}
}

// Publishers name aws_sqs, or aws.sns when they publish to SNS topics;
// subscribers aws_sqs. Nothing is resolved to answer.
func TestMessagingSystem(t *testing.T) {
	if got := newPublisher(nil, nil, PublisherConfig{}, nil).MessagingSystem(); got != MessagingSystem {
		t.Errorf("queue publisher: %q, want %q", got, MessagingSystem)
	}
	if got := newPublisher(nil, nil, PublisherConfig{SNS: true}, nil).MessagingSystem(); got != MessagingSystemSNS {
		t.Errorf("SNS publisher: %q, want %q", got, MessagingSystemSNS)
	}
	sub, err := newSubscriber(nil, nil, SubscriberConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if got := sub.MessagingSystem(); got != MessagingSystem {
		t.Errorf("subscriber: %q, want %q", got, MessagingSystem)
	}
}
