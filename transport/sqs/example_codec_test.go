package sqs_test

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqs"
)

// A service moving from github.com/ThreeDotsLabs/watermill-aws keeps its
// wire format, so that the services still on watermill-aws read what it
// publishes and it reads what they publish: the UUID in
// _watermill_message_uuid, each metadata key in an attribute of its own,
// the payload as the body.
func ExampleWatermillAWSCodec() {
	msg := message.NewMessage("5f0c7c1e-order-1", []byte(`{"order":1}`))
	msg.Metadata.Set("correlation_id", "c-1")
	m, err := sqs.WatermillAWSCodec{}.Marshal(msg)
	if err != nil {
		panic(err)
	}
	for _, name := range slices.Sorted(maps.Keys(m.MessageAttributes)) {
		a := m.MessageAttributes[name]
		fmt.Println(name, aws.ToString(a.DataType), aws.ToString(a.StringValue))
	}
	fmt.Println(aws.ToString(m.Body))

	// In a service, the URL parameter selects it on both sides (or set
	// PublisherConfig.Codec and SubscriberConfig.Codec).
	_ = func(ctx context.Context) (message.Publisher, error) {
		return transport.OpenPublisher(ctx, "sqs://?region=eu-west-1&codec=watermill-aws")
	}
	// Output:
	// _watermill_message_uuid String 5f0c7c1e-order-1
	// correlation_id String c-1
	// {"order":1}
}
