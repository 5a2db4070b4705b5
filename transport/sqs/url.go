package sqs

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/berth-go/berth/internal/pipeurl"
	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport"
)

func init() { transport.Register("sqs", driver{}) }

// driver opens sqs:// URLs; see the package documentation, "# URLs".
type driver struct{}

// parseClient reads the parts of u shared by publishers and subscribers.
func parseClient(u *url.URL, p *urlparam.Params, c *ClientConfig, q *QueueConfig) {
	if u.Path != "" && u.Path != "/" {
		p.Fail("path", "sqs URLs take no path, got %q (queues are named by topic)", u.Path)
	}
	secure := p.Bool("secure", false)
	endpoint := p.String("endpoint", "")
	if u.Host != "" {
		if endpoint != "" {
			p.Fail("endpoint", "given together with a host (%s); use one", u.Host)
		}
		scheme := "http"
		if secure {
			scheme = "https"
		}
		endpoint = scheme + "://" + u.Host
	} else if endpoint != "" {
		if e, err := url.Parse(endpoint); err != nil || e.Scheme == "" || e.Host == "" {
			p.Fail("endpoint", "%q is not an absolute URL such as http://127.0.0.1:4566", endpoint)
		}
	}
	c.Endpoint = endpoint
	if u.User != nil {
		pw, _ := u.User.Password()
		c.Credentials = credentials.NewStaticCredentialsProvider(u.User.Username(), pw, "")
	}
	c.Region = p.String("region", "")
	c.RequestAttempts = p.Int("request_attempts", 0, 1, 100)

	q.Create = p.Bool("create", false)
	q.FIFO = p.Bool("fifo", false)
	q.ContentBasedDeduplication = p.Bool("content_dedup", false)
	q.MaximumMessageSize = p.Int("max_message_size", 0, 1024, 1<<20)
	q.DeadLetterQueue = p.String("dead_letter_queue", "")
	q.MaxReceiveCount = p.Int("max_receive_count", 0, -1, 1000)
}

// parsePublisher reads the publisher's own parameters into cfg.
func parsePublisher(p *urlparam.Params, cfg *PublisherConfig) {
	cfg.PublishConcurrency = p.Int("publish_concurrency", 0, 1, 1024)
	cfg.PublishLinger = p.Duration("publish_linger", 0, 0, MaxPublishLinger)
	cfg.Groups = parseGroups(p, "groups")
	cfg.RequireSubscribers = p.Bool("require_subscribers", false)
	cfg.SubscriptionsTTL = p.Duration("subscriptions_ttl", 0, -1, time.Hour)
}

// parseGroups reads topic:group pairs separated by commas
// ("orders:billing,*:audit") into PublisherConfig.Groups; a topic may hold
// ':' (the group is after the last one).
func parseGroups(p *urlparam.Params, name string) map[string][]string {
	v := p.String(name, "")
	if v == "" {
		return nil
	}
	groups := map[string][]string{}
	for _, pair := range strings.Split(v, ",") {
		i := strings.LastIndexByte(pair, ':')
		if i <= 0 || i == len(pair)-1 {
			p.Fail(name, "%q is not topic:group (a topic, or * for every topic, then a group)", pair)
			continue
		}
		topic, group := pair[:i], pair[i+1:]
		if !slices.Contains(groups[topic], group) {
			groups[topic] = append(groups[topic], group)
		}
	}
	return groups
}

// parseSubscriber reads the subscriber's own parameters into cfg, the
// pipeline's included.
func parseSubscriber(p *urlparam.Params, cfg *SubscriberConfig) {
	cfg.ConsumerGroup = p.String("consumer_group", "")
	cfg.WaitTime = p.Duration("wait_time", 0, -1, 20*time.Second)
	cfg.VisibilityTimeout = p.Duration("visibility_timeout", 0, time.Second, MaxVisibilityTimeout)
	cfg.SettleInterval = p.Duration("settle_interval", 0, -1, time.Minute)
	pipeurl.Parse(p, &cfg.Pipeline)
}

func (driver) OpenPublisher(_ context.Context, u *url.URL, o transport.Options) (message.Publisher, error) {
	p := urlparam.New(u.Query())
	var cfg PublisherConfig
	parseClient(u, p, &cfg.Client, &cfg.Queue)
	cfg.SNS = p.Bool("sns", false)
	cfg.Codec = parseCodec(p)
	parsePublisher(p, &cfg)
	// One URL serves both sides: the subscriber's parameters are checked,
	// then ignored.
	parseSubscriber(p, new(SubscriberConfig))
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("sqs: %w: %w", transport.ErrInvalidConfig, err)
	}
	pub, err := NewPublisher(cfg, o.Logger)
	if err != nil {
		return nil, err
	}
	return pub, nil
}

// subscriberConfig returns the subscriber config u and o describe.
func subscriberConfig(u *url.URL, o transport.Options) (SubscriberConfig, error) {
	p := urlparam.New(u.Query())
	var cfg SubscriberConfig
	parseClient(u, p, &cfg.Client, &cfg.Queue)
	cfg.SNS = p.Bool("sns", false)
	cfg.Codec = parseCodec(p)
	parseSubscriber(p, &cfg)
	cfg.Pipeline.Observer = o.Observer
	// One URL serves both sides: the publisher's parameters are checked,
	// then ignored.
	parsePublisher(p, new(PublisherConfig))
	if err := p.Err(); err != nil {
		return SubscriberConfig{}, fmt.Errorf("sqs: %w: %w", transport.ErrInvalidConfig, err)
	}
	group, err := o.ConsumerGroupFor(cfg.ConsumerGroup)
	if err != nil {
		return SubscriberConfig{}, fmt.Errorf("sqs: %w", err)
	}
	cfg.ConsumerGroup = group
	return cfg, nil
}

func (driver) OpenSubscriber(_ context.Context, u *url.URL, o transport.Options) (transport.StatefulSubscriber, error) {
	cfg, err := subscriberConfig(u, o)
	if err != nil {
		return nil, err
	}
	// Not NewSubscriber's result as it is: a nil *Subscriber in a
	// non-nil interface on error.
	sub, err := NewSubscriber(cfg, o.Logger)
	if err != nil {
		return nil, err
	}
	return sub, nil
}
