package sqs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
)

// ErrNoSubscribers is returned by Publish with
// PublisherConfig.RequireSubscribers when the SNS topic has no
// subscription: SNS would accept the messages and drop them. Nothing was
// sent.
var ErrNoSubscribers = errors.New("sqs: SNS topic has no subscribers")

// AllTopics is the key of PublisherConfig.Groups whose groups are declared
// for every topic.
const AllTopics = "*"

// validateGroups checks Groups: topics and group names not empty, and SNS
// set.
func (c PublisherConfig) validateGroups() []error {
	if len(c.Groups) == 0 {
		return nil
	}
	var errs []error
	if !c.SNS {
		errs = append(errs, errors.New("Groups: needs SNS: consumer groups are SQS queues subscribed to an SNS topic, and without SNS the publisher sends to the topic's own queue"))
	}
	for _, topic := range slices.Sorted(func(yield func(string) bool) {
		for k := range c.Groups {
			if !yield(k) {
				return
			}
		}
	}) {
		if topic == "" {
			errs = append(errs, errors.New(`Groups: an empty topic (use "*" for every topic)`))
		}
		if len(c.Groups[topic]) == 0 {
			errs = append(errs, fmt.Errorf("Groups[%q]: no group", topic))
		}
		for _, g := range c.Groups[topic] {
			if g == "" {
				errs = append(errs, fmt.Errorf("Groups[%q]: an empty group name", topic))
			}
		}
	}
	return errs
}

// groupsOf returns the groups declared for topic: its own and those of
// AllTopics, without repeats.
func (c PublisherConfig) groupsOf(topic string) []string {
	var gs []string
	for _, g := range append(slices.Clone(c.Groups[topic]), c.Groups[AllTopics]...) {
		if !slices.Contains(gs, g) {
			gs = append(gs, g)
		}
	}
	return gs
}

// snsSubscriptionsGen counts SNS subscriptions made by this process; a
// cached "no subscription" answer older than the latest is asked again.
var snsSubscriptionsGen atomic.Uint64

// declarer makes a publisher's declared groups' queues and subscriptions,
// once per topic, with the subscriber's code (opener.prepareGroup).
type declarer struct {
	o *opener

	mu   sync.Mutex
	done map[string]*declared
}

// declared is one topic's declaration: made once, tried again after an
// error.
type declared struct {
	mu   sync.Mutex
	done bool
}

func newDeclarer(api API, t *topics, cfg PublisherConfig, logger watermill.LoggerAdapter) *declarer {
	// The queues a group's Subscriber would create, with its defaults.
	scfg := SubscriberConfig{Queue: cfg.Queue, SNS: true}.WithDefaults()
	return &declarer{
		o: &opener{
			api:    api,
			cfg:    scfg,
			queues: newResolver(api, scfg.Queue, seconds(scfg.VisibilityTimeout, MaxVisibilityTimeout)),
			topics: t,
			logger: logger,
		},
		done: map[string]*declared{},
	}
}

// declare subscribes the declared groups' queues of topic, the first time.
func (d *declarer) declare(ctx context.Context, topic string, groups []string) error {
	d.mu.Lock()
	e, ok := d.done[topic]
	if !ok {
		e = &declared{}
		d.done[topic] = e
	}
	d.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return nil
	}
	for _, g := range groups {
		if _, _, err := d.o.prepareGroup(ctx, topic, g); err != nil {
			return fmt.Errorf("sqs: declare consumer group %s of %s: %w", g, topic, err)
		}
	}
	e.done = true
	return nil
}

// subscribed answers whether SNS topics have subscriptions, from
// ListSubscriptionsByTopic, cached per topic for a TTL.
type subscribed struct {
	api SNSAPI
	ttl time.Duration

	mu     sync.Mutex
	topics map[string]subscribedEntry // by topic ARN
}

type subscribedEntry struct {
	any    bool
	at     time.Time
	gen    uint64
	warned bool // "no subscription" logged since the topic last had one
}

// check reports whether topicARN has a subscription and whether the
// caller should warn that it has none (once, until it has one again).
func (s *subscribed) check(ctx context.Context, topicARN string) (has, warn bool, err error) {
	gen := snsSubscriptionsGen.Load()
	s.mu.Lock()
	e, ok := s.topics[topicARN]
	s.mu.Unlock()
	if !ok || s.ttl <= 0 || time.Since(e.at) >= s.ttl || (!e.any && e.gen != gen) {
		at := time.Now()
		has, err := s.list(ctx, topicARN)
		if err != nil {
			return false, false, err
		}
		e.any, e.at, e.gen = has, at, gen
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e.warned = s.topics[topicARN].warned
	warn = !e.any && !e.warned
	e.warned = !e.any
	if len(s.topics) >= maxCachedTopics {
		clear(s.topics)
	}
	s.topics[topicARN] = e
	return e.any, warn, nil
}

// maxCachedTopics bounds the subscriptions cache; when full it starts
// over.
const maxCachedTopics = 10000

func (s *subscribed) list(ctx context.Context, topicARN string) (bool, error) {
	in := &awssns.ListSubscriptionsByTopicInput{TopicArn: aws.String(topicARN)}
	for {
		out, err := s.api.ListSubscriptionsByTopic(ctx, in)
		if err != nil {
			return false, fmt.Errorf("sqs: list subscriptions of SNS topic %s: %w", topicARN, err)
		}
		if len(out.Subscriptions) > 0 {
			return true, nil
		}
		if out.NextToken == nil {
			return false, nil
		}
		in.NextToken = out.NextToken
	}
}
