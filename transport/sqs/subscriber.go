package sqs

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// NewSubscriber returns a Watermill subscriber over SQS: each
// Subscribe(ctx, topic) opens a Source on the topic's queue (or, with a
// ConsumerGroup, on queue "<topic>-<group>" subscribed to the SNS topic) and
// runs the shared receive pipeline over it. Clients not supplied in
// cfg.Client are built now (see ClientConfig); queues are resolved on first
// use and cached.
// SubscribeInitialize creates (with Queue.Create) and subscribes the queue
// without consuming.
func NewSubscriber(cfg SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	api, snsAPI, err := cfg.Client.resolve(context.Background(), cfg.usesSNS())
	if err != nil {
		return nil, err
	}
	return newSubscriber(api, snsAPI, cfg, logger)
}

// usesSNS reports whether the subscriber subscribes its queues to SNS
// topics (and so needs an SNS client).
func (c SubscriberConfig) usesSNS() bool { return c.SNS || c.ConsumerGroup != "" }

// opener resolves the queues of a subscriber's topics.
type opener struct {
	api    API
	cfg    SubscriberConfig // defaults applied
	queues *resolver
	topics *topics
	logger watermill.LoggerAdapter
}

func newSubscriber(api API, snsAPI SNSAPI, cfg SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	cfg = cfg.WithDefaults()
	o := &opener{
		api:    api,
		cfg:    cfg,
		queues: newResolver(api, cfg.Queue, seconds(cfg.VisibilityTimeout, MaxVisibilityTimeout)),
		topics: newTopics(snsAPI, cfg.Queue),
		logger: logger,
	}
	rs, err := receiver.NewSubscriber(o.open, receiver.SubscriberConfig{
		Pipeline: cfg.Pipeline,
		Logger:   logger,
		Initialize: func(topic string) error {
			_, _, err := o.prepare(context.Background(), topic)
			return err
		},
		Name:            o.queueName,
		System:          MessagingSystem,
		DestinationName: o.queueName,
		ConsumerGroup:   cfg.ConsumerGroup,
	})
	if err != nil {
		return nil, err
	}
	return &Subscriber{Subscriber: rs}, nil
}

// Subscriber is a Watermill message.Subscriber (and
// message.SubscribeInitializer) over SQS queues: the shared receive
// pipeline (receiver.Subscriber: Subscribe, Close, Shutdown,
// ListenerStates) over one source per topic. Every transport's
// NewSubscriber returns its own type embedding receiver.Subscriber, as
// sqlqueue.Subscriber and mem.Subscriber do.
type Subscriber struct {
	*receiver.Subscriber
}

// queueName is the queue a topic is consumed from.
func (o *opener) queueName(topic string) string {
	return o.cfg.Queue.groupName(topic, o.cfg.ConsumerGroup)
}

// groupName is the queue consumer group group consumes topic from:
// "<topic>-<group>", or the topic's own queue for group "".
func (c QueueConfig) groupName(topic, group string) string {
	if group != "" {
		return c.name(topic + "-" + group)
	}
	return c.name(topic)
}

// prepare resolves (or creates) the topic's queue and dead-letter queue and,
// in SNS mode, subscribes the queue to the SNS topic.
func (o *opener) prepare(ctx context.Context, topic string) (q, dlq *queue, err error) {
	return o.prepareGroup(ctx, topic, o.cfg.ConsumerGroup)
}

// prepareGroup is prepare for consumer group group's queue: what a
// Subscriber with that ConsumerGroup does on Subscribe, and what a
// Publisher does for the groups it declares (PublisherConfig.Groups).
func (o *opener) prepareGroup(ctx context.Context, topic, group string) (q, dlq *queue, err error) {
	q, err = o.queues.resolve(ctx, o.cfg.Queue.groupName(topic, group), true)
	if err != nil {
		return nil, nil, err
	}
	if o.cfg.Queue.DeadLetterQueue != "" {
		if dlq, err = o.queues.resolve(ctx, o.queues.dlqName(), false); err != nil {
			return nil, nil, fmt.Errorf("sqs: dead-letter queue: %w", err)
		}
	}
	if o.cfg.usesSNS() || group != "" {
		arn, err := o.topics.resolve(ctx, o.cfg.Queue.name(topic))
		if err != nil {
			return nil, nil, err
		}
		if err := o.topics.subscribe(ctx, o.api, arn, q); err != nil {
			return nil, nil, err
		}
	}
	return q, dlq, nil
}

func (o *opener) open(ctx context.Context, topic string) (transport.Source, error) {
	q, dlq, err := o.prepare(ctx, topic)
	if err != nil {
		return nil, err
	}
	src := newSource(o.api, q, dlq, o.cfg, o.logger)
	if o.cfg.Queue.Create {
		// A queue deleted under a running subscriber is created again
		// (with its SNS subscription): SQS gives a queue of the same name
		// the same URL, so the source keeps working.
		src.recreate = func(ctx context.Context) error {
			o.queues.forget(q.name)
			nq, _, err := o.prepare(ctx, topic)
			if err == nil && nq.url != q.url {
				err = fmt.Errorf("sqs: re-created queue %s has a new URL %s", q.name, nq.url)
			}
			return err
		}
	}
	if q.fifo {
		return &fifoSource{src}, nil
	}
	return src, nil
}
