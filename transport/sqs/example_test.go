package sqs_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqs"
)

// Topics become queue names SQS accepts; a topic that had to change gets a
// hash suffix so that distinct topics never share a queue.
func ExampleSanitizeName() {
	fmt.Println(sqs.SanitizeName("orders", false))
	fmt.Println(sqs.SanitizeName("orders", true))
	fmt.Println(sqs.SanitizeName("orders.created", false))
	// Output:
	// orders
	// orders.fifo
	// orders_created-18d455b7
}

// A subscriber and a publisher with typed configuration, against the fauxqs
// emulator. Against AWS, leave Client empty: the default configuration
// (environment, profiles, roles) is loaded.
func ExampleNewSubscriber() {
	client := sqs.ClientConfig{Endpoint: "http://127.0.0.1:4566", Region: "us-east-1"}
	queue := sqs.QueueConfig{Create: true, DeadLetterQueue: "orders-dlq"}

	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client, Queue: queue}, nil)
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{
		Client:            client,
		Queue:             queue,
		VisibilityTimeout: time.Minute,
		Pipeline:          receiver.Config{Concurrency: 32},
	}, nil)
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	msgs, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		panic(err)
	}
	_ = pub.Publish("orders", message.NewMessage("1", []byte(`{"id":1}`)))
	msg := <-msgs
	fmt.Println(string(msg.Payload), msg.Metadata.Get(sqs.MetadataReceiveCount))
	msg.Ack()
}

// Your own SQS client, as your other code builds it (retryer, middleware,
// endpoint and all), used as it is. A wrapper around it works too: Client.SQS
// takes any sqs.API. Without a client, Berth builds one from Client.AWS and
// keeps that configuration's Retryer.
func ExampleClientConfig() {
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRetryer(func() aws.Retryer { return retry.AddWithMaxAttempts(retry.NewStandard(), 5) }))
	if err != nil {
		panic(err)
	}
	client := awssqs.NewFromConfig(cfg)
	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{Client: sqs.ClientConfig{SQS: client}}, nil)
	if err != nil {
		panic(err)
	}
	defer sub.Close()
}

// The same through a URL, so that an environment variable can swap the
// transport: the host is the emulator's endpoint, user:password static
// credentials; parameters set the configuration fields.
func Example_url() {
	ctx := context.Background()
	const url = "sqs://test:test@127.0.0.1:4566?region=us-east-1&create=true&concurrency=32&visibility_timeout=1m"
	sub, err := transport.OpenSubscriber(ctx, url)
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	pub, err := transport.OpenPublisher(ctx, "sqs://test:test@127.0.0.1:4566?region=us-east-1&create=true")
	if err != nil {
		panic(err)
	}
	defer pub.Close()
}

// Counting API requests by operation, for requests per message.
func ExampleRequestCounter() {
	var counter sqs.RequestCounter
	client := sqs.ClientConfig{APIOptions: append([]func(*middleware.Stack) error(nil), counter.APIOption)}
	_ = client
	// … publish and consume, then:
	fmt.Println(counter.Total())
	// Output: 0
}
