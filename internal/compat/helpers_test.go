package compat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport/sqs"
)

// The helpers below are those of transport/sqs's own tests, on the
// package's exported API.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append([]goleak.Option{
		// The SDK's HTTP transport keeps idle keep-alive connections.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	}, testenv.WatermillSuiteLeaks...)...)
}

// clientConfig points at the emulator from BERTH_TEST_SQS_ENDPOINT, or skips.
func clientConfig(t testing.TB) sqs.ClientConfig {
	t.Helper()
	return sqs.ClientConfig{
		AWS: &aws.Config{
			Region:      testenv.DefaultSQSRegion,
			Credentials: credentials.NewStaticCredentialsProvider(testenv.SQSAccessKeyID, testenv.SQSSecretAccessKey, ""),
		},
		Endpoint: testenv.SQSEndpoint(t),
	}
}

// rawClient is a plain SDK client, for acting as "another tool".
func rawClient(t testing.TB) *awssqs.Client {
	t.Helper()
	c := clientConfig(t)
	return awssqs.NewFromConfig(*c.AWS, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(c.Endpoint) })
}

func testLogger(testing.TB) watermill.LoggerAdapter {
	if testing.Verbose() {
		return watermill.NewStdLogger(false, false)
	}
	return watermill.NopLogger{}
}

// createQueue creates a fresh queue and returns its URL.
func createQueue(t *testing.T, api *awssqs.Client, name string, attrs map[string]string) string {
	t.Helper()
	out, err := api.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

func newTestSubscriber(t *testing.T, cfg sqs.SubscriberConfig) *sqs.Subscriber {
	t.Helper()
	if cfg.Client.Endpoint == "" {
		cfg.Client = clientConfig(t)
	}
	if cfg.WaitTime == 0 {
		cfg.WaitTime = time.Second
	}
	sub, err := sqs.NewSubscriber(cfg, testLogger(t))
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

// received is what a queue hands a consumer for m.
func received(m *types.Message, id string) *types.Message {
	return &types.Message{MessageId: aws.String(id), Body: m.Body, MessageAttributes: m.MessageAttributes}
}

func newMsg(uuid string, payload []byte, kv ...string) *message.Message {
	m := message.NewMessage(uuid, payload)
	for i := 0; i+1 < len(kv); i += 2 {
		m.Metadata.Set(kv[i], kv[i+1])
	}
	return m
}

func manyKeys(n int) []string {
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("key_%02d", i), fmt.Sprintf("value %d", i))
	}
	return kv
}
