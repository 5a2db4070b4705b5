package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/transport"
)

// SNS limits: 256 KiB per message and per PublishBatch request.
const maxSNSBytes = 256 * 1024

// topics resolves SNS topic names to ARNs once and caches them.
type topics struct {
	api SNSAPI
	cfg QueueConfig

	mu   sync.Mutex
	arns map[string]string
	subs map[string]bool // "topicARN queueARN" already subscribed
}

func newTopics(api SNSAPI, cfg QueueConfig) *topics {
	return &topics{api: api, cfg: cfg, arns: map[string]string{}, subs: map[string]bool{}}
}

// resolve returns the ARN of the SNS topic named name: CreateTopic (which
// is idempotent) when Create is set, else a ListTopics search.
func (t *topics) resolve(ctx context.Context, name string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if arn, ok := t.arns[name]; ok {
		return arn, nil
	}
	if t.api == nil {
		return "", errors.New("sqs: no SNS client")
	}
	var arn string
	if t.cfg.Create {
		in := &awssns.CreateTopicInput{Name: aws.String(name)}
		if t.cfg.FIFO {
			in.Attributes = map[string]string{"FifoQueue": "true"}
		}
		out, err := t.api.CreateTopic(ctx, in)
		if err != nil {
			return "", fmt.Errorf("sqs: create SNS topic %s: %w", name, err)
		}
		arn = aws.ToString(out.TopicArn)
	} else {
		var next *string
		for arn == "" {
			out, err := t.api.ListTopics(ctx, &awssns.ListTopicsInput{NextToken: next})
			if err != nil {
				return "", fmt.Errorf("sqs: list SNS topics: %w", err)
			}
			for _, tp := range out.Topics {
				if a := aws.ToString(tp.TopicArn); strings.HasSuffix(a, ":"+name) {
					arn = a
					break
				}
			}
			if next = out.NextToken; next == nil {
				break
			}
		}
		if arn == "" {
			return "", fmt.Errorf("sqs: SNS topic %s: %w (set QueueConfig.Create to create it)", name, transport.ErrQueueNotFound)
		}
	}
	t.arns[name] = arn
	return arn, nil
}

// subscribe subscribes queue q to the SNS topic topicARN with raw message
// delivery (so the SQS message is the published body and attributes), once.
// When Create is set it also grants the topic SendMessage on the queue (the
// queue policy real SQS requires).
func (t *topics) subscribe(ctx context.Context, sqsAPI API, topicARN string, q *queue) error {
	key := topicARN + " " + q.arn
	t.mu.Lock()
	done := t.subs[key]
	t.mu.Unlock()
	if done {
		return nil
	}
	if t.cfg.Create {
		policy, _ := json.Marshal(map[string]any{
			"Version": "2012-10-17",
			"Statement": []map[string]any{{
				"Sid":       "berth-sns-" + SanitizeName(topicARN, false),
				"Effect":    "Allow",
				"Principal": map[string]string{"Service": "sns.amazonaws.com"},
				"Action":    "sqs:SendMessage",
				"Resource":  q.arn,
				"Condition": map[string]any{"ArnEquals": map[string]string{"aws:SourceArn": topicARN}},
			}},
		})
		if _, err := sqsAPI.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{
			QueueUrl:   aws.String(q.url),
			Attributes: map[string]string{string(types.QueueAttributeNamePolicy): string(policy)},
		}); err != nil {
			return fmt.Errorf("sqs: allow SNS topic to send to %s: %w", q.name, err)
		}
	}
	if _, err := t.api.Subscribe(ctx, &awssns.SubscribeInput{
		TopicArn:   aws.String(topicARN),
		Protocol:   aws.String("sqs"),
		Endpoint:   aws.String(q.arn),
		Attributes: map[string]string{"RawMessageDelivery": "true"},
	}); err != nil {
		return fmt.Errorf("sqs: subscribe %s to SNS topic %s: %w", q.name, topicARN, err)
	}
	snsSubscriptionsGen.Add(1)
	t.mu.Lock()
	t.subs[key] = true
	t.mu.Unlock()
	return nil
}

// publishSNS publishes msgs to topic's SNS topic with PublishBatch.
func (p *Publisher) publishSNS(ctx context.Context, topic string, msgs []*message.Message) error {
	name := p.cfg.Queue.name(topic)
	arn, err := p.topics.resolve(ctx, name)
	if err != nil {
		return fmt.Errorf("sqs: publish to %s: %w", topic, err)
	}
	if gs := p.cfg.groupsOf(topic); len(gs) > 0 {
		if err := p.declarer.declare(ctx, topic, gs); err != nil {
			return fmt.Errorf("sqs: publish to %s: %w", topic, err)
		}
	}
	has, warn, err := p.subscribed.check(ctx, arn)
	if err != nil {
		return fmt.Errorf("sqs: publish to %s: %w", topic, err)
	}
	if !has {
		p.noSubscribers.Add(int64(len(msgs)))
		if p.cfg.RequireSubscribers {
			return fmt.Errorf("sqs: publish %d message(s) to %s: %w: SNS topic %s (RequireSubscribers)", len(msgs), topic, ErrNoSubscribers, arn)
		}
		if warn {
			// Once per topic, until it has a subscription again; the
			// messages are counted in Stats().NoSubscribers.
			p.logger.Error("Publishing to an SNS topic without subscriptions: SNS drops these messages (declare consumer groups with PublisherConfig.Groups, or set RequireSubscribers)",
				ErrNoSubscribers, watermill.LogFields{"topic": topic, "sns_topic": arn})
		}
	}
	if len(msgs) == 1 && p.cfg.PublishLinger > 0 {
		return p.publishTopicOne(topic, name, arn, msgs[0])
	}
	outs, errs := p.prepare(topic, msgs, maxSNSBytes, p.cfg.Queue.FIFO, false)
	batches := pack(outs, min(p.cfg.MaxBatchBytes, maxSNSBytes))
	concurrency := p.cfg.PublishConcurrency
	if p.cfg.Queue.FIFO {
		concurrency = 1
	}
	errs = append(errs, p.sendBatches(batches, concurrency, name, p.sendTopic(arn))...)
	return errors.Join(errs...)
}

// sendTopic returns the sendFunc of PublishBatch to topicARN.
func (p *Publisher) sendTopic(topicARN string) sendFunc[*outgoing] {
	return func(ctx context.Context, b []*outgoing) ([]failure, error) {
		in := &awssns.PublishBatchInput{TopicArn: aws.String(topicARN), PublishBatchRequestEntries: make([]snstypes.PublishBatchRequestEntry, len(b))}
		for i, o := range b {
			attrs := make(map[string]snstypes.MessageAttributeValue, len(o.e.attrs))
			for k, v := range o.e.attrs {
				attrs[k] = snstypes.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
			}
			e := snstypes.PublishBatchRequestEntry{Id: positional(i), Message: aws.String(o.e.body), MessageAttributes: attrs}
			if o.group != "" {
				e.MessageGroupId = aws.String(o.group)
				e.MessageDeduplicationId = aws.String(o.dedup)
			}
			in.PublishBatchRequestEntries[i] = e
		}
		out, err := p.sns.PublishBatch(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("sqs: SNS PublishBatch: %w", err)
		}
		fs := make([]failure, 0, len(out.Failed))
		for _, f := range out.Failed {
			var i int
			if _, err := fmt.Sscan(aws.ToString(f.Id), &i); err != nil {
				continue
			}
			fs = append(fs, failure{index: i, err: &EntryError{Op: "PublishBatch", Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}})
		}
		return fs, nil
	}
}
