package mem

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/delaymeta"
	"github.com/berth-go/berth/internal/pipeurl"
	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// Scheme is the URL scheme of this transport.
const Scheme = "mem"

// MessagingSystem is the messaging.system that package telemetry reports
// for this transport's publishers and subscribers. The OpenTelemetry
// conventions define no value for an in-process broker; this one is
// Berth's ("berth." and the URL scheme).
const MessagingSystem = "berth.mem"

func init() { transport.Register(Scheme, driver{}) }

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Broker to publish to. Required.
	Broker *Broker
}

// Validate reports every invalid field.
func (c PublisherConfig) Validate() error {
	if c.Broker == nil {
		return fmt.Errorf("%w: Broker: required", transport.ErrInvalidConfig)
	}
	return nil
}

// Publisher publishes to a Broker.
type Publisher struct {
	b      *Broker
	closed atomic.Bool
	parked atomic.Int64
}

// NewPublisher returns a publisher; logger is accepted for symmetry with
// the other transports and may be nil.
func NewPublisher(cfg PublisherConfig, _ watermill.LoggerAdapter) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Publisher{b: cfg.Broker}, nil
}

// Publish implements message.Publisher. Messages are copied; the caller may
// reuse them.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return transport.ErrClosed
	}
	now := time.Now()
	for _, m := range msgs {
		if err := m.Context().Err(); err != nil {
			return fmt.Errorf("mem: publish: %w", err)
		}
		if _, _, err := delaymeta.Delay(m.Metadata, now, delayKeys); err != nil {
			return fmt.Errorf("mem: publish %s to %q: %w", m.UUID, topic, err)
		}
	}
	p.parked.Add(int64(p.b.publish(topic, msgs)))
	return nil
}

// ParkedMessages counts the messages this publisher parked: published to a
// topic with no consumer group and no default reader (see Broker.Publish),
// for telemetry.Parker.
func (p *Publisher) ParkedMessages() int64 { return p.parked.Load() }

// Close implements message.Publisher.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}

// MessagingSystem returns MessagingSystem, for package telemetry.
func (p *Publisher) MessagingSystem() string { return MessagingSystem }

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Broker to consume from. Required.
	Broker *Broker
	// ConsumerGroup: subscribers of one group share a queue per topic; each
	// group gets every message. Defaults to "" (the topic's default queue).
	ConsumerGroup string
	// VisibilityTimeout is how long a claimed message stays invisible
	// unless renewed. Defaults to DefaultVisibilityTimeout (30s).
	VisibilityTimeout time.Duration
	// Pipeline configures the receive pipeline.
	Pipeline receiver.Config
}

// Validate reports every invalid field at once.
func (c SubscriberConfig) Validate() error {
	var errs []error
	if c.Broker == nil {
		errs = append(errs, errors.New("Broker: required"))
	}
	if c.VisibilityTimeout < 0 {
		errs = append(errs, fmt.Errorf("VisibilityTimeout: must be ≥ 0, got %s", c.VisibilityTimeout))
	}
	if err := c.Pipeline.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// Subscriber is a Watermill message.Subscriber over a Broker: the shared
// receive pipeline (receiver.Subscriber) over one source per topic, as
// every transport's NewSubscriber returns.
type Subscriber struct {
	*receiver.Subscriber
}

// NewSubscriber returns a Watermill subscriber over the broker.
func NewSubscriber(cfg SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	vis := cfg.VisibilityTimeout
	if vis == 0 {
		vis = DefaultVisibilityTimeout
	}
	b, group := cfg.Broker, cfg.ConsumerGroup
	rs, err := receiver.NewSubscriber(
		func(_ context.Context, topic string) (transport.Source, error) {
			return b.newSource(topic, group, vis), nil
		},
		receiver.SubscriberConfig{
			Pipeline:      cfg.Pipeline,
			Logger:        logger,
			Initialize:    func(topic string) error { b.Ensure(topic, group); return nil },
			System:        MessagingSystem,
			ConsumerGroup: group,
		})
	if err != nil {
		return nil, err
	}
	return &Subscriber{Subscriber: rs}, nil
}

// driver opens mem://NAME URLs: NAME selects a process-wide broker.
type driver struct{}

func brokerOf(u *url.URL) (*Broker, error) {
	name := u.Host + strings.TrimPrefix(u.Path, "/")
	if name == "" {
		name = "default"
	}
	return Named(name), nil
}

// parseSubscriber reads a subscriber's URL parameters into cfg:
// consumer_group, visibility_timeout and the pipeline's. Publishers have
// none of their own.
func parseSubscriber(p *urlparam.Params, cfg *SubscriberConfig) {
	cfg.ConsumerGroup = p.String("consumer_group", "")
	cfg.VisibilityTimeout = p.Duration("visibility_timeout", 0, time.Millisecond, 12*time.Hour)
	pipeurl.Parse(p, &cfg.Pipeline)
}

func (driver) OpenPublisher(_ context.Context, u *url.URL, o transport.Options) (message.Publisher, error) {
	b, err := brokerOf(u)
	if err != nil {
		return nil, err
	}
	// One URL serves both sides: the subscriber's parameters are checked,
	// then ignored.
	p := urlparam.New(u.Query())
	parseSubscriber(p, new(SubscriberConfig))
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("mem: %w: %w", transport.ErrInvalidConfig, err)
	}
	pub, err := NewPublisher(PublisherConfig{Broker: b}, o.Logger)
	if err != nil {
		return nil, err
	}
	return pub, nil
}

func (driver) OpenSubscriber(_ context.Context, u *url.URL, o transport.Options) (transport.StatefulSubscriber, error) {
	b, err := brokerOf(u)
	if err != nil {
		return nil, err
	}
	p := urlparam.New(u.Query())
	cfg := SubscriberConfig{Broker: b}
	parseSubscriber(p, &cfg)
	cfg.Pipeline.Observer = o.Observer
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("mem: %w: %w", transport.ErrInvalidConfig, err)
	}
	if cfg.ConsumerGroup, err = o.ConsumerGroupFor(cfg.ConsumerGroup); err != nil {
		return nil, fmt.Errorf("mem: %w", err)
	}
	// Not NewSubscriber's result as it is: a nil *Subscriber in a
	// non-nil interface on error.
	sub, err := NewSubscriber(cfg, o.Logger)
	if err != nil {
		return nil, err
	}
	return sub, nil
}
