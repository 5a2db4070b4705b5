package sqs

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
)

// failingHTTP answers every request with a 500 InternalError without
// sending it anywhere, and counts the requests (each one an attempt).
type failingHTTP struct{ requests atomic.Int64 }

func (f *failingHTTP) Do(req *http.Request) (*http.Response, error) {
	f.requests.Add(1)
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	body := `{"__type":"InternalError","message":"injected"}`
	return &http.Response{
		StatusCode:    http.StatusInternalServerError,
		Status:        "500 Internal Server Error",
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// observedRetryer is a caller's own retryer: the SDK's standard one with
// its own attempts, no delay, and a count of the times it was asked whether
// an error is retryable.
type observedRetryer struct {
	aws.RetryerV2
	attempts  int
	consulted atomic.Int64
}

func (r *observedRetryer) IsErrorRetryable(err error) bool {
	r.consulted.Add(1)
	return r.RetryerV2.IsErrorRetryable(err)
}

func (r *observedRetryer) MaxAttempts() int { return r.attempts }

func (r *observedRetryer) RetryDelay(int, error) (time.Duration, error) { return 0, nil }

// TestCallerRetryerIsKept: a Retryer in ClientConfig.AWS is the one the
// built clients consult, with its own attempts, or RequestAttempts when
// that is set (wrapped, not replaced); without one, Berth's default
// attempts apply.
func TestCallerRetryerIsKept(t *testing.T) {
	for _, tc := range []struct {
		name            string
		retryer         bool // the caller sets one, with 4 attempts
		requestAttempts int
		want            int64 // attempts of one request
	}{
		{"caller's retryer", true, 0, 4},
		{"caller's retryer capped by RequestAttempts", true, 2, 2},
		{"no retryer: Berth's default", false, 0, DefaultRequestAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			httpc := &failingHTTP{}
			r := &observedRetryer{RetryerV2: retry.NewStandard(), attempts: 4}
			cfg := aws.Config{
				Region:      "us-east-1",
				Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
				HTTPClient:  httpc,
			}
			if tc.retryer {
				cfg.Retryer = func() aws.Retryer { return r }
			}
			c := ClientConfig{AWS: &cfg, Endpoint: "http://127.0.0.1:1", RequestAttempts: tc.requestAttempts}
			sq, sn, err := c.resolve(context.Background(), true)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sq.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String("http://127.0.0.1:1/000000000000/q")}); err == nil {
				t.Fatal("ReceiveMessage succeeded against a server that always fails")
			}
			if got := httpc.requests.Load(); got != tc.want {
				t.Errorf("SQS: %d attempts, want %d", got, tc.want)
			}
			if _, err := sn.ListTopics(context.Background(), &awssns.ListTopicsInput{}); err == nil {
				t.Fatal("ListTopics succeeded against a server that always fails")
			}
			if got := httpc.requests.Load(); got != 2*tc.want {
				t.Errorf("SNS: %d attempts, want %d", got-tc.want, tc.want)
			}
			if tc.retryer && r.consulted.Load() == 0 {
				t.Error("the caller's retryer was never consulted")
			}
			if !tc.retryer && r.consulted.Load() != 0 {
				t.Error("a retryer the caller did not set was consulted")
			}
			if c.AWS.Retryer != nil != tc.retryer {
				t.Error("building the clients changed the caller's aws.Config")
			}
		})
	}
}

func TestClientConfigValidate(t *testing.T) {
	sq := &awssqs.Client{}
	sn := &awssns.Client{}
	var nilSQS *awssqs.Client
	apiOpt := func(*middleware.Stack) error { return nil }
	for _, tc := range []struct {
		name    string
		cfg     interface{ Validate() error }
		invalid []string // fields the error names; none: valid
	}{
		{"SQS client alone", SubscriberConfig{Client: ClientConfig{SQS: sq}}, nil},
		{"SQS client and an unused AWS config", SubscriberConfig{Client: ClientConfig{SQS: sq, AWS: &aws.Config{}}}, []string{"Client.AWS"}},
		{"SQS client, AWS config for the SNS client", SubscriberConfig{Client: ClientConfig{SQS: sq, AWS: &aws.Config{}, Endpoint: "http://x:1"}, ConsumerGroup: "g"}, nil},
		{"both clients and unused settings", SubscriberConfig{Client: ClientConfig{SQS: sq, SNS: sn, Endpoint: "http://x:1", APIOptions: []func(*middleware.Stack) error{apiOpt}}, SNS: true},
			[]string{"Client.Endpoint", "Client.APIOptions"}},
		{"a nil *awssqs.Client", SubscriberConfig{Client: ClientConfig{SQS: nilSQS}}, []string{"Client.SQS"}},
		{"publisher: SQS client, SNS client built", PublisherConfig{Client: ClientConfig{SQS: sq, Region: "eu-west-1"}, SNS: true}, nil},
		{"publisher: SQS client, no SNS, a region", PublisherConfig{Client: ClientConfig{SQS: sq, Region: "eu-west-1", RequestAttempts: 2}},
			[]string{"Client.Region", "Client.RequestAttempts"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.invalid) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, transport.ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			for _, f := range tc.invalid {
				if !strings.Contains(err.Error(), f+":") {
					t.Errorf("error does not name %s: %v", f, err)
				}
			}
		})
	}
}

// countingSQS is a caller's SQS client: a plain one wrapped to count calls.
type countingSQS struct {
	API
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingSQS) count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[op]
}

func (c *countingSQS) add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[op]++
}

func (c *countingSQS) ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, opts ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	c.add("ReceiveMessage")
	return c.API.ReceiveMessage(ctx, in, opts...)
}

func (c *countingSQS) DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, opts ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error) {
	c.add("DeleteMessageBatch")
	return c.API.DeleteMessageBatch(ctx, in, opts...)
}

func (c *countingSQS) GetQueueUrl(ctx context.Context, in *awssqs.GetQueueUrlInput, opts ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error) {
	c.add("GetQueueUrl")
	return c.API.GetQueueUrl(ctx, in, opts...)
}

// countingSNS is a caller's SNS client, wrapped to count calls.
type countingSNS struct {
	SNSAPI
	publishes, subscribes atomic.Int64
}

func (c *countingSNS) PublishBatch(ctx context.Context, in *awssns.PublishBatchInput, opts ...func(*awssns.Options)) (*awssns.PublishBatchOutput, error) {
	c.publishes.Add(1)
	return c.SNSAPI.PublishBatch(ctx, in, opts...)
}

func (c *countingSNS) Subscribe(ctx context.Context, in *awssns.SubscribeInput, opts ...func(*awssns.Options)) (*awssns.SubscribeOutput, error) {
	c.subscribes.Add(1)
	return c.SNSAPI.Subscribe(ctx, in, opts...)
}

// TestSuppliedClientsAreUsed: a publisher and a subscriber given their
// clients send every request through them, over SNS and a consumer group.
func TestSuppliedClientsAreUsed(t *testing.T) {
	rawSQS, rawSNS, err := clientConfig(t, nil).clients(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sq := &countingSQS{API: rawSQS}
	sn := &countingSNS{SNSAPI: rawSNS}
	clients := ClientConfig{SQS: sq, SNS: sn}
	pub, err := NewPublisher(PublisherConfig{Client: clients, Queue: QueueConfig{Create: true}, SNS: true}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := NewSubscriber(SubscriberConfig{
		Client: clients, Queue: QueueConfig{Create: true}, ConsumerGroup: "g", WaitTime: time.Second,
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	topic := testenv.UniqueName("clients")
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := message.NewMessage(watermill.NewUUID(), []byte("through the caller's clients"))
	if err := pub.Publish(topic, want); err != nil {
		t.Fatal(err)
	}
	got := next(t, ch)
	if got.UUID != want.UUID {
		t.Fatalf("got message %s, want %s", got.UUID, want.UUID)
	}
	got.Ack()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"GetQueueUrl", "ReceiveMessage", "DeleteMessageBatch"} {
		if sq.count(op) == 0 {
			t.Errorf("no %s through the supplied SQS client", op)
		}
	}
	if sn.publishes.Load() == 0 || sn.subscribes.Load() == 0 {
		t.Errorf("supplied SNS client: %d PublishBatch, %d Subscribe; want both > 0", sn.publishes.Load(), sn.subscribes.Load())
	}
}
