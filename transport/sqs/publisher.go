package sqs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/errgroup"

	"github.com/berth-go/berth/internal/delaymeta"
	"github.com/berth-go/berth/transport"
)

// maxDelay is SQS's largest per-message delay.
const maxDelay = 15 * time.Minute

// Publisher publishes Watermill messages to SQS queues (or, with
// PublisherConfig.SNS, to SNS topics), in batch requests of up to 10.
type Publisher struct {
	cfg    PublisherConfig
	api    API
	sns    SNSAPI
	queues *resolver
	topics *topics
	logger watermill.LoggerAdapter

	mu     sync.RWMutex
	closed bool
	wg     sync.WaitGroup

	coalescers coalescers // with PublishLinger: one per queue or SNS topic

	declarer      *declarer   // PublisherConfig.Groups
	subscribed    *subscribed // with SNS: whether topics have subscriptions
	noSubscribers atomic.Int64
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a publisher. Clients not supplied in cfg.Client are
// built now (see ClientConfig); queues are resolved on first use and cached.
func NewPublisher(cfg PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	api, snsAPI, err := cfg.Client.resolve(context.Background(), cfg.SNS)
	if err != nil {
		return nil, err
	}
	return newPublisher(api, snsAPI, cfg, logger), nil
}

func newPublisher(api API, snsAPI SNSAPI, cfg PublisherConfig, logger watermill.LoggerAdapter) *Publisher {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	p := &Publisher{
		cfg:    cfg,
		api:    api,
		sns:    snsAPI,
		queues: newResolver(api, cfg.Queue, 0),
		topics: newTopics(snsAPI, cfg.Queue),
		logger: logger,
	}
	p.declarer = newDeclarer(api, p.topics, cfg, logger)
	p.subscribed = &subscribed{api: snsAPI, ttl: cfg.SubscriptionsTTL, topics: map[string]subscribedEntry{}}
	return p
}

// Stats returns the publisher's counts.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{NoSubscribers: p.noSubscribers.Load()}
}

// MessagingSystem returns the messaging.system of the publisher's
// destination, for package telemetry: MessagingSystemSNS with
// PublisherConfig.SNS, else MessagingSystem.
func (p *Publisher) MessagingSystem() string {
	if p.cfg.SNS {
		return MessagingSystemSNS
	}
	return MessagingSystem
}

// outgoing is one message ready to send.
type outgoing struct {
	msg   *message.Message
	e     encoded
	group string
	dedup string
	delay int32
}

// Publish sends msgs to topic's queue (or SNS topic) in batch requests of up
// to 10 messages and MaxBatchBytes, up to PublishConcurrency at once (one at
// a time on FIFO queues, to keep their order). Entries that fail on the
// server side are sent again, up to SendAttempts. A message whose context is
// done is not sent; a request is cancelled when the contexts of all its
// messages are done. The error joins one error per message not sent, each
// naming the message UUID.
//
// A single message is sent with SendMessage; with PublishLinger it joins
// the single messages of concurrent calls in a shared batch request
// instead (see PublisherConfig.PublishLinger). Either way Publish returns
// once its message is sent or failed, or at once when the message context
// is done: a message still waiting for company is then withdrawn, one
// already in a request in flight may still arrive.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return transport.ErrClosed
	}
	p.wg.Add(1)
	p.mu.RUnlock()
	defer p.wg.Done()
	if len(msgs) == 0 {
		return nil
	}
	ctx := msgs[0].Context()
	if p.cfg.SNS {
		return p.publishSNS(ctx, topic, msgs)
	}
	q, err := p.queues.resolve(ctx, p.cfg.Queue.name(topic), true)
	if err != nil {
		return fmt.Errorf("sqs: publish to %s: %w", topic, err)
	}
	if len(msgs) == 1 {
		return p.publishOne(topic, q, msgs[0])
	}
	outs, errs := p.prepare(topic, msgs, q.maxSize, q.fifo, true)
	batches := pack(outs, p.cfg.MaxBatchBytes)
	concurrency := p.cfg.PublishConcurrency
	if q.fifo {
		concurrency = 1
	}
	errs = append(errs, p.sendBatches(batches, concurrency, q.name, p.sendQueue(q))...)
	return errors.Join(errs...)
}

// prepare encodes msgs; messages that cannot be sent get an error.
func (p *Publisher) prepare(topic string, msgs []*message.Message, maxSize int, fifo, delayOK bool) ([]*outgoing, []error) {
	outs := make([]*outgoing, 0, len(msgs))
	var errs []error
	for _, m := range msgs {
		o, err := p.prepareOne(topic, m, maxSize, fifo, delayOK)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		outs = append(outs, o)
	}
	return outs, errs
}

// prepareOne encodes m, or returns why it cannot be sent.
func (p *Publisher) prepareOne(topic string, m *message.Message, maxSize int, fifo, delayOK bool) (*outgoing, error) {
	fail := func(err error) error {
		return fmt.Errorf("sqs: publish %s to %s: %w", m.UUID, topic, err)
	}
	if err := m.Context().Err(); err != nil {
		return nil, fail(err)
	}
	now := time.Now()
	d, _, err := delaymeta.Delay(m.Metadata, now, delayKeys)
	if err != nil {
		return nil, fail(err)
	}
	o := &outgoing{msg: m}
	if d > 0 {
		switch {
		case !delayOK:
			return nil, fail(fmt.Errorf("%w: a delay of %s through SNS, which has no per-message delay", ErrDelayUnsupported, d))
		case fifo:
			return nil, fail(fmt.Errorf("%w: a delay of %s on a FIFO queue, which takes no per-message delay", ErrDelayUnsupported, d))
		case d > maxDelay:
			return nil, fail(fmt.Errorf("%w: a delay of %s exceeds SQS's limit of %s", ErrDelayUnsupported, d, maxDelay))
		}
		// Whole seconds, rounded up: never delivered early.
		o.delay = seconds(d, maxDelay)
	}
	encode := m
	if mark := delaymeta.Mark(m.Metadata, now, time.Duration(o.delay)*time.Second, delayKeys); mark != "" {
		// Sent with the marker, so that published again (by a requeuer)
		// the message is not delayed twice; m itself is left as it was.
		encode = m.Copy()
		encode.Metadata.Set(delaymeta.Marker, mark)
	}
	e, err := marshal(p.cfg.Codec, encode)
	if err != nil {
		return nil, fail(err)
	}
	if e.size > maxSize {
		return nil, fail(fmt.Errorf("%d bytes (body and attributes) exceed the limit of %d bytes: %w", e.size, maxSize, transport.ErrMessageTooLarge))
	}
	o.e = e
	if fifo {
		o.group = m.Metadata.Get(MetadataGroupID)
		if o.group == "" {
			// The ordering key is the message group: messages of one key
			// are then handed out one at a time, in order, by SQS itself.
			o.group = m.Metadata.Get(transport.MetadataOrderingKey)
		}
		if o.group == "" {
			o.group = topic
		}
		o.dedup = m.Metadata.Get(MetadataDeduplicationID)
		if o.dedup == "" {
			o.dedup = m.UUID
		}
	}
	return o, nil
}

// delayKeys is the publisher's own delay key; internal/delaymeta reads it
// and Watermill's (components/delay).
var delayKeys = delaymeta.Keys{Delay: MetadataDelay, DelaySeconds: true}

// pack groups outs, in order, into batches of at most maxBatch messages and
// maxBytes bytes.
func pack(outs []*outgoing, maxBytes int) [][]*outgoing {
	var (
		batches [][]*outgoing
		cur     []*outgoing
		size    int
	)
	for _, o := range outs {
		if len(cur) == maxBatch || (len(cur) > 0 && size+o.e.size > maxBytes) {
			batches = append(batches, cur)
			cur, size = nil, 0
		}
		cur = append(cur, o)
		size += o.e.size
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches
}

// sendBatches sends the batches, at most concurrency at once, and returns
// an error per message not sent.
func (p *Publisher) sendBatches(batches [][]*outgoing, concurrency int, dest string, send sendFunc[*outgoing]) []error {
	var (
		mu   sync.Mutex
		errs []error
		g    errgroup.Group // no error of its own: each message's goes to errs
	)
	g.SetLimit(max(1, concurrency))
	for _, b := range batches {
		g.Go(func() error {
			ctx, cancel := allDone(b)
			defer cancel()
			res := runBatch(ctx, b, p.cfg.SendAttempts, send)
			mu.Lock()
			defer mu.Unlock()
			for i, err := range res {
				if err != nil {
					errs = append(errs, fmt.Errorf("sqs: publish %s to %s: %w", b[i].msg.UUID, dest, err))
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	return errs
}

// allDone returns a context cancelled once the contexts of all messages in
// b are done (never, if one of them can never be done).
func allDone(b []*outgoing) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		left  atomic.Int64
		stops []func() bool
	)
	left.Store(int64(len(b)))
	for _, o := range b {
		mctx := o.msg.Context()
		if mctx.Done() == nil {
			for _, stop := range stops {
				stop()
			}
			return ctx, cancel
		}
		stops = append(stops, context.AfterFunc(mctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// sendQueue returns the sendFunc of SendMessageBatch to q.
func (p *Publisher) sendQueue(q *queue) sendFunc[*outgoing] {
	return func(ctx context.Context, b []*outgoing) ([]failure, error) {
		in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: make([]types.SendMessageBatchRequestEntry, len(b))}
		for i, o := range b {
			e := types.SendMessageBatchRequestEntry{
				Id:                positional(i),
				MessageBody:       aws.String(o.e.body),
				MessageAttributes: o.e.attrs,
				DelaySeconds:      o.delay,
			}
			if o.group != "" {
				e.MessageGroupId = aws.String(o.group)
				e.MessageDeduplicationId = aws.String(o.dedup)
			}
			in.Entries[i] = e
		}
		out, err := p.api.SendMessageBatch(ctx, in)
		if err != nil {
			if isQueueMissing(err) {
				p.queues.forget(q.name)
				err = fmt.Errorf("%w: %w", transport.ErrQueueNotFound, err)
			}
			return nil, fmt.Errorf("sqs: SendMessageBatch: %w", err)
		}
		return failures("SendMessageBatch", out.Failed), nil
	}
}

// Close sends the messages waiting for company (PublishLinger) at once and
// waits for Publish calls and batch requests in progress; later calls
// return transport.ErrClosed. It is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for _, c := range p.coalescers.all() {
		c.flush()
	}
	p.wg.Wait()
	// Again: a call under way when Close began may have made a coalescer.
	for _, c := range p.coalescers.all() {
		c.flush()
		c.wait()
	}
	return nil
}
