package sqs

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// BenchmarkPublishOneOverhead measures what a single-message Publish costs
// on top of the SDK call (a fake API at the seam): encoding, checks,
// building the request.
//
//	go test -run '^$' -bench PublishOneOverhead -benchmem ./transport/sqs/
func BenchmarkPublishOneOverhead(b *testing.B) {
	for _, linger := range []struct {
		name string
		cfg  PublisherConfig
	}{{"SendMessage", PublisherConfig{}}, {"linger", PublisherConfig{PublishLinger: 1}}} {
		b.Run(linger.name, func(b *testing.B) {
			p := newPublisher(nullSender{newFakeSender(false)}, nil, linger.cfg, nil)
			defer p.Close()
			payload := []byte(`{"event":"order_placed","order_id":"0000000000","customer":"c-000000","amount_cents":12345,"currency":"EUR","items":3}`)
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Publish("t", message.NewMessage(watermill.NewUUID(), payload)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nullSender accepts every message and keeps nothing.
type nullSender struct{ *fakeSender }

func (nullSender) SendMessage(context.Context, *awssqs.SendMessageInput, ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	return &awssqs.SendMessageOutput{}, nil
}

func (nullSender) SendMessageBatch(_ context.Context, in *awssqs.SendMessageBatchInput, _ ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	out := &awssqs.SendMessageBatchOutput{Successful: make([]types.SendMessageBatchResultEntry, len(in.Entries))}
	for i, e := range in.Entries {
		out.Successful[i] = types.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String("m")}
	}
	return out, nil
}
