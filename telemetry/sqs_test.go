package telemetry_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/smithy-go/middleware"

	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/telemetry"
	"github.com/berth-go/berth/transport/sqs"
)

var sqsBackend = backend{
	system: sqs.MessagingSystem,
	// Consumers report the queue: the topic, sanitized.
	destination: func(topic string) string { return sqs.SanitizeName(topic, false) },
	open: func(t *testing.T, pcfg receiver.Config) (message.Publisher, subscriber, telemetry.RoundTripper) {
		env := testenv.SQSConfig(t)
		counter := &sqs.RequestCounter{}
		client := sqs.ClientConfig{
			AWS: &aws.Config{
				Region:      env.Region,
				Credentials: credentials.NewStaticCredentialsProvider(env.AccessKeyID, env.SecretAccessKey, ""),
			},
			Endpoint:   env.Endpoint,
			APIOptions: []func(*middleware.Stack) error{counter.APIOption},
		}
		queue := sqs.QueueConfig{Create: true}
		pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client, Queue: queue}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{
			Client:            client,
			Queue:             queue,
			Pipeline:          pcfg,
			WaitTime:          time.Second, // keeps Close quick
			VisibilityTimeout: 10 * time.Second,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub, telemetry.RoundTripFunc(counter.Counts)
	},
}

// TestSQS runs the suite over SQS (BERTH_TEST_SQS_ENDPOINT, the fauxqs
// emulator).
func TestSQS(t *testing.T) {
	testenv.SQSEndpoint(t) // skips (or fails under CI) without an endpoint
	runSuite(t, sqsBackend)
}
