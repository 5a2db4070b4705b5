package sqs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// Defaults for configuration fields left zero.
const (
	// DefaultWaitTime is the ReceiveMessage long-poll wait. A long poll is
	// never cut short, so it is also the longest an idle subscriber takes
	// to close: 5s keeps Close well inside Kubernetes' 30s grace and costs
	// an idle subscriber 12 requests a minute (20s, SQS's most: 3, but Close
	// may take 20s). See docs/transports/sqs.md, "Closing".
	DefaultWaitTime = 5 * time.Second
	// DefaultVisibilityTimeout is the visibility timeout each ReceiveMessage
	// asks for; the heartbeat renews it at 70%.
	DefaultVisibilityTimeout = 30 * time.Second
	// DefaultSettleInterval is how long an ack or nack waits for others to
	// share its DeleteMessageBatch or ChangeMessageVisibilityBatch request.
	DefaultSettleInterval = 20 * time.Millisecond
	// DefaultSettleAttempts bounds the attempts for one entry of a
	// settlement batch that failed on the server side.
	DefaultSettleAttempts = 3
	// DefaultPublishConcurrency bounds the concurrent SendMessageBatch (or
	// PublishBatch) requests of one Publish call.
	DefaultPublishConcurrency = 8
	// DefaultSendAttempts bounds the attempts to send one message whose
	// batch entry failed on the server side.
	DefaultSendAttempts = 3
	// DefaultMaxBatchBytes is the largest SendMessageBatch request payload
	// (SQS's limit: 1 MiB).
	DefaultMaxBatchBytes = 1 << 20
	// DefaultRequestAttempts is the SDK retryer's attempts per API request
	// (throttling, 5xx, network errors).
	DefaultRequestAttempts = 3
	// DefaultMaxRequestBackoff caps the SDK retryer's backoff between
	// attempts of one request.
	DefaultMaxRequestBackoff = 2 * time.Second
	// DefaultSubscriptionsTTL is how long a publisher through SNS reuses
	// the answer to whether a topic has subscriptions: SNS allows 30
	// ListSubscriptionsByTopic requests a second per account.
	DefaultSubscriptionsTTL = 10 * time.Second
	// DefaultMaxReceiveCount is the redrive policy's maxReceiveCount when a
	// queue is created with a DeadLetterQueue: a backstop above the
	// pipeline's DefaultMaxAttempts, which dead-letters with a reason first.
	DefaultMaxReceiveCount = 20
)

// MaxVisibilityTimeout is SQS's largest visibility timeout (12 hours).
const MaxVisibilityTimeout = 12 * time.Hour

// Values of messaging.system that package telemetry reports for this
// transport: the OpenTelemetry conventions' own.
const (
	// MessagingSystem is reported by subscribers and by publishers that
	// send to queues.
	MessagingSystem = "aws_sqs"
	// MessagingSystemSNS is reported by publishers with PublisherConfig.SNS.
	MessagingSystemSNS = "aws.sns"
)

// MaxPublishLinger is the longest PublishLinger: a longer wait would only
// add latency, since a busy publisher fills batches of 10 sooner.
const MaxPublishLinger = time.Second

// ClientConfig says how to reach SQS and SNS: clients the caller supplies
// (SQS, SNS), or clients built from an AWS SDK configuration (AWS and the
// fields after it). The zero value builds both from the AWS default
// configuration (environment, shared config and credentials files, SSO, web
// identity, container and instance roles).
//
// AWS, Region, Endpoint, Credentials, RequestAttempts and APIOptions shape
// only the clients Berth builds; setting one when every client needed is
// supplied is an error, since it would be silently ignored. A supplied SQS
// client with an AWS configuration is fine when an SNS client is needed
// (PublisherConfig.SNS, SubscriberConfig.SNS or ConsumerGroup) and not
// supplied: that one is built.
type ClientConfig struct {
	// SQS is the SQS client to use, as it is: Berth adds no retryer, API
	// options or endpoint to it (configure those on the client, or wrap an
	// *awssqs.Client to observe or alter requests). Defaults to a client
	// built from AWS and the fields below.
	SQS API

	// SNS is the SNS client to use, as it is, when SNS is used
	// (PublisherConfig.SNS, SubscriberConfig.SNS or ConsumerGroup). Defaults
	// to a client built from AWS and the fields below.
	SNS SNSAPI

	// AWS is the SDK configuration to build clients from. Its Retryer, if
	// any, is kept (RequestAttempts, when set, caps its attempts). Defaults
	// to config.LoadDefaultConfig with a connection pool sized for
	// concurrent long polls.
	AWS *aws.Config

	// Region overrides the region of AWS. Defaults to the region AWS
	// resolves. URL: region.
	Region string

	// Endpoint overrides the service endpoint, for emulators such as fauxqs
	// or LocalStack ("http://127.0.0.1:4566"); SQS and SNS share it.
	// Defaults to the AWS endpoint of the region. URL: the host, or endpoint.
	Endpoint string

	// Credentials overrides the credentials of AWS. Defaults to the
	// default credential chain. URL: user:password.
	Credentials aws.CredentialsProvider

	// RequestAttempts is the maximum attempts per API request: it caps the
	// retryer of AWS (retry.AddWithMaxAttempts, through
	// aws.Config.RetryMaxAttempts), so a Claim never retries longer than
	// that; its error goes back to the pipeline, which backs off with
	// jitter. Defaults to AWS.RetryMaxAttempts when set, else to the
	// attempts of AWS.Retryer when set, else to DefaultRequestAttempts (3)
	// with backoff capped at DefaultMaxRequestBackoff. URL:
	// request_attempts.
	RequestAttempts int

	// APIOptions are added to every SQS and SNS client Berth builds, for
	// middleware such as RequestCounter.APIOption. Defaults to none.
	APIOptions []func(*middleware.Stack) error
}

func (c ClientConfig) validate(needSNS bool) []error {
	var errs []error
	if c.RequestAttempts < 0 {
		errs = append(errs, fmt.Errorf("Client.RequestAttempts: must be ≥ 0, got %d", c.RequestAttempts))
	}
	if isNilPointer(c.SQS) {
		errs = append(errs, fmt.Errorf("Client.SQS: a nil %T", c.SQS))
	}
	if isNilPointer(c.SNS) {
		errs = append(errs, fmt.Errorf("Client.SNS: a nil %T", c.SNS))
	}
	if c.SQS != nil && (c.SNS != nil || !needSNS) {
		why := "Client.SQS is supplied and no SNS client is needed"
		if c.SNS != nil {
			why = "Client.SQS and Client.SNS are supplied"
		}
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"AWS", c.AWS != nil},
			{"Region", c.Region != ""},
			{"Endpoint", c.Endpoint != ""},
			{"Credentials", c.Credentials != nil},
			{"RequestAttempts", c.RequestAttempts != 0},
			{"APIOptions", len(c.APIOptions) > 0},
		} {
			if f.set {
				errs = append(errs, fmt.Errorf("Client.%s: would be ignored: %s (configure the supplied clients instead)", f.name, why))
			}
		}
	}
	return errs
}

// isNilPointer reports whether v holds a nil pointer (a typed nil that
// would panic on first use).
func isNilPointer(v any) bool {
	if v == nil {
		return false
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// resolve returns the supplied clients and builds the missing ones: the SQS
// client always, the SNS client when needSNS (else it may be nil).
func (c ClientConfig) resolve(ctx context.Context, needSNS bool) (API, SNSAPI, error) {
	var (
		sq API    = c.SQS
		sn SNSAPI = c.SNS
	)
	if sq != nil && (sn != nil || !needSNS) {
		return sq, sn, nil
	}
	bsq, bsn, err := c.clients(ctx)
	if err != nil {
		return nil, nil, err
	}
	if sq == nil {
		sq = bsq
	}
	if sn == nil {
		sn = bsn
	}
	return sq, sn, nil
}

// clients builds an SQS and an SNS client from the configuration, whatever
// clients were supplied.
func (c ClientConfig) clients(ctx context.Context) (*awssqs.Client, *awssns.Client, error) {
	var cfg aws.Config
	if c.AWS != nil {
		cfg = c.AWS.Copy()
	} else {
		var err error
		cfg, err = config.LoadDefaultConfig(ctx, config.WithHTTPClient(
			awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
				// Up to a wave of concurrent long polls share the pool.
				t.MaxIdleConnsPerHost = 128
			})))
		if err != nil {
			return nil, nil, fmt.Errorf("sqs: load AWS config: %w", err)
		}
	}
	if c.Region != "" {
		cfg.Region = c.Region
	}
	if c.Credentials != nil {
		cfg.Credentials = c.Credentials
	}
	if c.RequestAttempts > 0 {
		// The clients wrap their retryer in retry.AddWithMaxAttempts.
		cfg.RetryMaxAttempts = c.RequestAttempts
	}
	if cfg.Retryer == nil {
		cfg.Retryer = defaultRetryer(cfg.RetryMode)
	}
	cfg.APIOptions = append(cfg.APIOptions[:len(cfg.APIOptions):len(cfg.APIOptions)], c.APIOptions...)
	var endpoint *string
	if c.Endpoint != "" {
		endpoint = aws.String(c.Endpoint)
	}
	sq := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		if endpoint != nil {
			o.BaseEndpoint = endpoint
		}
	})
	sn := awssns.NewFromConfig(cfg, func(o *awssns.Options) {
		if endpoint != nil {
			o.BaseEndpoint = endpoint
		}
	})
	return sq, sn, nil
}

// defaultRetryer is the retryer of clients whose AWS configuration has none:
// the SDK's standard retryer (adaptive when mode says so) with
// DefaultRequestAttempts and backoff capped at DefaultMaxRequestBackoff.
func defaultRetryer(mode aws.RetryMode) func() aws.Retryer {
	std := func(o *retry.StandardOptions) {
		o.MaxAttempts = DefaultRequestAttempts
		o.MaxBackoff = DefaultMaxRequestBackoff
	}
	if mode == aws.RetryModeAdaptive {
		return func() aws.Retryer {
			return retry.NewAdaptiveMode(func(o *retry.AdaptiveModeOptions) {
				o.StandardOptions = append(o.StandardOptions, std)
			})
		}
	}
	return func() aws.Retryer { return retry.NewStandard(std) }
}

// QueueConfig says which queue a topic maps to and how to create it.
type QueueConfig struct {
	// Create creates missing queues (and SNS topics and subscriptions) with
	// the attributes below. When false, a missing queue is an error wrapping
	// transport.ErrQueueNotFound. Defaults to false. URL: create.
	Create bool

	// FIFO uses FIFO queues (and topics): names get the ".fifo" suffix and
	// messages need a group id (MetadataGroupID, else the topic). Defaults
	// to false. URL: fifo.
	FIFO bool

	// ContentBasedDeduplication is set on created FIFO queues. The
	// publisher always sends a deduplication id (MetadataDeduplicationID,
	// else the message UUID), so it matters only for other producers.
	// Defaults to false. URL: content_dedup.
	ContentBasedDeduplication bool

	// MaximumMessageSize is set on created queues, in bytes (1024 to
	// 1048576). Defaults to SQS's default (1 MiB). URL: max_message_size.
	MaximumMessageSize int

	// DeadLetterQueue names the dead-letter queue: the pipeline sends
	// messages it dead-letters there (with AttributeDeadLetter), and
	// created queues get a redrive policy to it. Empty: no dead-letter
	// queue; the pipeline's dead-letters are made visible again and left to
	// the queue's own redrive policy. Defaults to "". URL: dead_letter_queue.
	DeadLetterQueue string

	// MaxReceiveCount is the redrive policy's maxReceiveCount on created
	// queues with a DeadLetterQueue; negative sets no redrive policy.
	// Defaults to DefaultMaxReceiveCount (20). URL: max_receive_count.
	MaxReceiveCount int

	// Attributes are extra attributes for created queues (for example
	// KmsMasterKeyId, MessageRetentionPeriod). Defaults to none.
	Attributes map[string]string

	// QueueName maps a Watermill topic (with "-<consumer group>" appended
	// for consumer groups) to a queue or SNS topic name. Defaults to
	// SanitizeName(topic, FIFO).
	QueueName func(topic string) string
}

func (c QueueConfig) validate() []error {
	var errs []error
	if c.MaximumMessageSize != 0 && (c.MaximumMessageSize < 1024 || c.MaximumMessageSize > 1<<20) {
		errs = append(errs, fmt.Errorf("Queue.MaximumMessageSize: must be 1024 to 1048576, got %d", c.MaximumMessageSize))
	}
	if c.MaxReceiveCount > 1000 {
		errs = append(errs, fmt.Errorf("Queue.MaxReceiveCount: must be at most 1000, got %d", c.MaxReceiveCount))
	}
	return errs
}

func (c QueueConfig) name(topic string) string {
	if c.QueueName != nil {
		return c.QueueName(topic)
	}
	return SanitizeName(topic, c.FIFO)
}

// SubscriberConfig configures a Subscriber. The zero value is the defaults.
type SubscriberConfig struct {
	// Pipeline configures the shared receive pipeline (concurrency, buffer,
	// retries, waves, back-pressure). Its EmptyDelay defaults to none
	// here, since an empty long poll already waited WaitTime. (The listener
	// asks in full requests of 10: a wave never has more polls than full
	// requests fit in the free buffer.)
	Pipeline receiver.Config

	// Client says how to reach SQS and SNS.
	Client ClientConfig

	// Queue says which queue each topic maps to and how to create it.
	Queue QueueConfig

	// ConsumerGroup makes the subscriber consume queue
	// "<topic>-<group>" (mapped by Queue.QueueName), subscribed to the SNS
	// topic of the Watermill topic, so every group gets every message
	// published with PublisherConfig.SNS. Defaults to "" (consume the
	// topic's own queue). URL: consumer_group.
	ConsumerGroup string

	// SNS subscribes the topic's own queue to the SNS topic of the same
	// name (implied by ConsumerGroup). Defaults to false. URL: sns.
	SNS bool

	// WaitTime is the ReceiveMessage long-poll wait, rounded to seconds, at
	// most 20s; negative means short polling. Close lets a poll that is out
	// run to its end, so it bounds the Close of an idle subscriber; an idle
	// subscriber sends 60/WaitTime requests a minute. Defaults to
	// DefaultWaitTime (5s). URL: wait_time.
	WaitTime time.Duration

	// VisibilityTimeout is asked for on every ReceiveMessage and on every
	// heartbeat renewal (at 70% of it), rounded up to seconds. Defaults to
	// DefaultVisibilityTimeout (30s). URL: visibility_timeout.
	VisibilityTimeout time.Duration

	// SettleInterval is how long an ack or nack waits for others to share
	// its batch request (a full batch of 10 goes at once); negative sends
	// each at once. Defaults to DefaultSettleInterval (20ms). URL:
	// settle_interval.
	SettleInterval time.Duration

	// SettleAttempts bounds the attempts for a batch entry that failed on
	// the server side. Defaults to DefaultSettleAttempts (3).
	SettleAttempts int

	// Codec is the wire format: how a message maps to an SQS body and
	// message attributes and back. Defaults to BerthCodec (Berth's format);
	// WatermillAWSCodec reads and writes github.com/ThreeDotsLabs/watermill-aws's.
	// URL: codec (berth, watermill-aws).
	Codec Codec
}

// WithDefaults returns c with every zero field set to its default.
func (c SubscriberConfig) WithDefaults() SubscriberConfig {
	if c.Pipeline.EmptyDelay == 0 && c.WaitTime >= 0 {
		c.Pipeline.EmptyDelay = -1
	}
	c.Pipeline = c.Pipeline.WithDefaults()
	if c.WaitTime == 0 {
		c.WaitTime = DefaultWaitTime
	}
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if c.SettleInterval == 0 {
		c.SettleInterval = DefaultSettleInterval
	}
	if c.SettleAttempts == 0 {
		c.SettleAttempts = DefaultSettleAttempts
	}
	if c.Queue.MaxReceiveCount == 0 {
		c.Queue.MaxReceiveCount = DefaultMaxReceiveCount
	}
	if c.Codec == nil {
		c.Codec = BerthCodec{}
	}
	return c
}

// Validate reports every invalid field at once, wrapped in
// transport.ErrInvalidConfig.
func (c SubscriberConfig) Validate() error {
	var errs []error
	if err := c.Pipeline.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Pipeline: %w", unwrapInvalid(err)))
	}
	errs = append(errs, c.Client.validate(c.usesSNS())...)
	errs = append(errs, c.Queue.validate()...)
	if c.WaitTime > 20*time.Second {
		errs = append(errs, fmt.Errorf("WaitTime: must be at most 20s, got %s", c.WaitTime))
	}
	if c.VisibilityTimeout < 0 || c.VisibilityTimeout > MaxVisibilityTimeout {
		errs = append(errs, fmt.Errorf("VisibilityTimeout: must be 1s to 12h, got %s", c.VisibilityTimeout))
	} else if c.VisibilityTimeout > 0 && c.VisibilityTimeout < time.Second {
		errs = append(errs, fmt.Errorf("VisibilityTimeout: must be 1s to 12h, got %s", c.VisibilityTimeout))
	}
	if c.SettleAttempts < 0 {
		errs = append(errs, fmt.Errorf("SettleAttempts: must be ≥ 0, got %d", c.SettleAttempts))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// PublisherConfig configures a Publisher. The zero value is the defaults.
type PublisherConfig struct {
	// Client says how to reach SQS and SNS.
	Client ClientConfig

	// Queue says which queue each topic maps to and how to create it.
	Queue QueueConfig

	// SNS publishes to the SNS topic of each Watermill topic (PublishBatch)
	// instead of its queue, so that every consumer group's queue subscribed
	// to it gets a copy. Defaults to false. URL: sns.
	SNS bool

	// Groups declares consumer groups ahead of their subscribers: topic →
	// group names, the key "*" standing for every topic. Before its first
	// publish to a topic (once per publisher and topic), the publisher
	// resolves each declared group's queue "<topic>-<group>" (creating it
	// with Queue.Create) and subscribes it to the SNS topic, as a Subscriber
	// with that ConsumerGroup does: the group then receives what is
	// published from the first publish on, not only after its first
	// Subscribe. Needs SNS. Defaults to none. URL: groups, topic:group
	// pairs separated by commas (groups=orders:billing,*:audit).
	Groups map[string][]string

	// RequireSubscribers refuses to publish to an SNS topic that has no
	// subscription, which SNS would accept and drop: Publish returns an
	// error wrapping ErrNoSubscribers and sends nothing. Without it such
	// messages are sent, counted in PublisherStats.NoSubscribers, and one
	// warning is logged per topic. Needs SNS. Defaults to false. URL:
	// require_subscribers.
	RequireSubscribers bool

	// SubscriptionsTTL is how long the publisher reuses the answer to
	// whether an SNS topic has subscriptions (one ListSubscriptionsByTopic
	// request per topic and TTL, never one per Publish). A subscription
	// made in this process (Subscribe, SubscribeInitialize, Groups) is seen
	// by the next Publish; one made elsewhere after at most the TTL.
	// Negative asks on every Publish. Used with SNS only. Defaults to
	// DefaultSubscriptionsTTL (10s). URL: subscriptions_ttl.
	SubscriptionsTTL time.Duration

	// PublishConcurrency bounds the concurrent batch requests of one
	// Publish call and, with PublishLinger, the coalesced batch requests in
	// flight per queue (or SNS topic). Defaults to
	// DefaultPublishConcurrency (8). URL: publish_concurrency.
	PublishConcurrency int

	// PublishLinger makes concurrent Publish calls of one message each
	// share batch requests: a message waits up to PublishLinger for others
	// to the same queue (or SNS topic); a batch goes when it holds 10
	// messages or MaxBatchBytes, or PublishLinger after its first message
	// arrived, up to PublishConcurrency batches in flight per queue. Each
	// call still returns once its own message is sent (or failed), with its
	// own entry's outcome. Calls of several messages are batched on their
	// own, as without it. Zero: every call sends its own requests (one
	// SendMessage for one message). At most 1s. Defaults to 0. URL:
	// publish_linger.
	PublishLinger time.Duration

	// SendAttempts bounds the attempts to send a message whose batch entry
	// failed on the server side. Defaults to DefaultSendAttempts (3).
	SendAttempts int

	// MaxBatchBytes bounds the payload of one batch request. Defaults to
	// DefaultMaxBatchBytes (1 MiB); SNS batches are further held to 256 KiB.
	MaxBatchBytes int

	// Codec is the wire format: how a message maps to an SQS body and
	// message attributes and back. Defaults to BerthCodec (Berth's format);
	// WatermillAWSCodec reads and writes github.com/ThreeDotsLabs/watermill-aws's.
	// URL: codec (berth, watermill-aws).
	Codec Codec
}

// WithDefaults returns c with every zero field set to its default.
func (c PublisherConfig) WithDefaults() PublisherConfig {
	if c.PublishConcurrency == 0 {
		c.PublishConcurrency = DefaultPublishConcurrency
	}
	if c.SendAttempts == 0 {
		c.SendAttempts = DefaultSendAttempts
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.SubscriptionsTTL == 0 {
		c.SubscriptionsTTL = DefaultSubscriptionsTTL
	}
	if c.Queue.MaxReceiveCount == 0 {
		c.Queue.MaxReceiveCount = DefaultMaxReceiveCount
	}
	if c.Codec == nil {
		c.Codec = BerthCodec{}
	}
	return c
}

// Validate reports every invalid field at once, wrapped in
// transport.ErrInvalidConfig.
func (c PublisherConfig) Validate() error {
	var errs []error
	errs = append(errs, c.Client.validate(c.SNS)...)
	errs = append(errs, c.Queue.validate()...)
	if c.PublishConcurrency < 0 {
		errs = append(errs, fmt.Errorf("PublishConcurrency: must be ≥ 0, got %d", c.PublishConcurrency))
	}
	if c.SendAttempts < 0 {
		errs = append(errs, fmt.Errorf("SendAttempts: must be ≥ 0, got %d", c.SendAttempts))
	}
	if c.MaxBatchBytes < 0 || c.MaxBatchBytes > 1<<20 {
		errs = append(errs, fmt.Errorf("MaxBatchBytes: must be 0 to 1048576, got %d", c.MaxBatchBytes))
	}
	if c.PublishLinger < 0 || c.PublishLinger > MaxPublishLinger {
		errs = append(errs, fmt.Errorf("PublishLinger: must be 0 to %s, got %s", MaxPublishLinger, c.PublishLinger))
	}
	errs = append(errs, c.validateGroups()...)
	if c.RequireSubscribers && !c.SNS {
		errs = append(errs, errors.New("RequireSubscribers: needs SNS (a queue always keeps what is sent to it)"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// seconds rounds d up to whole seconds, clamped to [0, max].
func seconds(d, max time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	d = min(d, max)
	return int32((d + time.Second - 1) / time.Second)
}

// unwrapInvalid strips the ErrInvalidConfig layer of a nested Validate
// error, so it is not repeated in the message.
func unwrapInvalid(err error) error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		if es := u.Unwrap(); len(es) == 2 && es[0] == transport.ErrInvalidConfig {
			return es[1]
		}
	}
	return err
}
