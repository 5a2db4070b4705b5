package sqs

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append([]goleak.Option{
		// The SDK's HTTP transport keeps idle keep-alive connections.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	}, testenv.WatermillSuiteLeaks...)...)
}

// clientConfig points at the emulator from BERTH_TEST_SQS_ENDPOINT, or skips.
func clientConfig(t testing.TB, counter *RequestCounter) ClientConfig {
	t.Helper()
	c := ClientConfig{
		AWS: &aws.Config{
			Region:      testenv.DefaultSQSRegion,
			Credentials: credentials.NewStaticCredentialsProvider(testenv.SQSAccessKeyID, testenv.SQSSecretAccessKey, ""),
		},
		Endpoint: testenv.SQSEndpoint(t),
	}
	if counter != nil {
		c.APIOptions = append(c.APIOptions, counter.APIOption)
	}
	return c
}

// rawClient is a plain SDK client, for acting as "another tool".
func rawClient(t testing.TB) *awssqs.Client {
	t.Helper()
	api, _, err := clientConfig(t, nil).clients(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return api
}

func testLogger(t testing.TB) watermill.LoggerAdapter {
	if testing.Verbose() {
		return watermill.NewStdLogger(false, false)
	}
	return watermill.NopLogger{}
}

// deadLetters drains a dead-letter queue into memory (SQS reads are
// destructive) and answers transporttest's DeadLetters by source queue.
type deadLetters struct {
	api  *awssqs.Client
	name string

	mu   sync.Mutex
	url  string
	seen []dlRecord
}

type dlRecord struct {
	queue, uuid, reason string
}

func (d *deadLetters) list(t *testing.T, queue string) []transporttest.DeadLetter {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d.url == "" {
		out, err := d.api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(d.name)})
		if err != nil {
			return nil // not created yet
		}
		d.url = aws.ToString(out.QueueUrl)
	}
	for {
		out, err := d.api.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(d.url), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			t.Fatalf("read dead-letter queue: %v", err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			var info struct {
				Reason string `json:"reason"`
				Queue  string `json:"queue"`
			}
			_ = json.Unmarshal([]byte(aws.ToString(m.MessageAttributes[AttributeDeadLetter].StringValue)), &info)
			d.seen = append(d.seen, dlRecord{queue: info.Queue, uuid: aws.ToString(m.MessageAttributes[AttributeUUID].StringValue), reason: info.Reason})
			_, _ = d.api.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(d.url), ReceiptHandle: m.ReceiptHandle})
		}
	}
	var res []transporttest.DeadLetter
	for _, r := range d.seen {
		if r.queue == queue {
			res = append(res, transporttest.DeadLetter{UUID: r.uuid, Reason: r.reason})
		}
	}
	return res
}

// waitUntil polls cond every 20ms until it holds or d passes.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
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
