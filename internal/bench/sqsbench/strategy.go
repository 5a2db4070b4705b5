package sqsbench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport/sqs"
)

// Strategy is one library under test: how it publishes and how it consumes
// at a given handler concurrency.
type Strategy struct {
	Name string
	// LongPoll is the library's default long-poll wait: an empty receive
	// back a second or more before it is an emulator artefact (see
	// Counter.LongPoll).
	LongPoll time.Duration
	// NewPublisher publishes through client, creating queues as needed.
	NewPublisher func(c Client) (message.Publisher, error)
	// NewSubscriber consumes through client with up to concurrency
	// handlers at once; Streams Subscribe calls on the topic give it that
	// concurrency.
	NewSubscriber func(c Client, concurrency int) (message.Subscriber, error)
	// Streams is how many Subscribe calls on one topic give the
	// subscriber the handler concurrency asked for.
	Streams func(concurrency int) int
	// PublishAll publishes a backlog the way the library publishes fastest
	// at a publish concurrency of 8.
	PublishAll func(pub message.Publisher, topic string, msgs []*message.Message) error
}

// Client is what a strategy needs to reach SQS.
type Client struct {
	AWS      aws.Config // region, credentials, and the counting HTTP client
	Endpoint string     // "" for AWS
}

// Berth is this module's transport with its defaults (5 s long polls,
// settlement coalesced into batches), one Subscribe with Concurrency
// handlers.
var Berth = Strategy{
	Name:     "berth",
	LongPoll: sqs.DefaultWaitTime,
	NewPublisher: func(c Client) (message.Publisher, error) {
		return sqs.NewPublisher(sqs.PublisherConfig{
			Client: sqs.ClientConfig{AWS: &c.AWS, Endpoint: c.Endpoint},
			Queue:  sqs.QueueConfig{Create: true},
		}, nil)
	},
	NewSubscriber: func(c Client, concurrency int) (message.Subscriber, error) {
		return sqs.NewSubscriber(sqs.SubscriberConfig{
			Client:   sqs.ClientConfig{AWS: &c.AWS, Endpoint: c.Endpoint},
			Queue:    sqs.QueueConfig{Create: true},
			Pipeline: receiver.Config{Concurrency: concurrency},
		}, nil)
	},
	Streams: func(int) int { return 1 },
	// Publish calls of 1,000 messages: each sends SendMessageBatch
	// requests of 10, 8 at once (PublishConcurrency's default).
	PublishAll: func(pub message.Publisher, topic string, msgs []*message.Message) error {
		for len(msgs) > 0 {
			n := min(len(msgs), 1000)
			if err := pub.Publish(topic, msgs[:n]...); err != nil {
				return err
			}
			msgs = msgs[n:]
		}
		return nil
	},
}

// WatermillAWS is github.com/ThreeDotsLabs/watermill-aws v1.0.1 with its
// defaults: one message per ReceiveMessage (20 s long polls), one
// DeleteMessage per ack, one SendMessage per published message. Its
// subscriber handles one message at a time per Subscribe call, so
// concurrency n takes n Subscribe calls on the topic.
var WatermillAWS = Strategy{
	Name:     "watermill-aws",
	LongPoll: 20 * time.Second,
	NewPublisher: func(c Client) (message.Publisher, error) {
		return wmsqs.NewPublisher(wmsqs.PublisherConfig{
			AWSConfig: c.AWS,
			OptFns:    endpointOption(c.Endpoint),
		}, watermill.NopLogger{})
	},
	NewSubscriber: func(c Client, _ int) (message.Subscriber, error) {
		return wmsqs.NewSubscriber(wmsqs.SubscriberConfig{
			AWSConfig: c.AWS,
			OptFns:    endpointOption(c.Endpoint),
		}, watermill.NopLogger{})
	},
	Streams: func(concurrency int) int { return concurrency },
	// Its Publish sends one message per request, in turn: 8 goroutines
	// publish one message per call.
	PublishAll: func(pub message.Publisher, topic string, msgs []*message.Message) error {
		return parallel(8, len(msgs), func(i int) error { return pub.Publish(topic, msgs[i]) })
	},
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first
// error.
func parallel(workers, n int, fn func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
		errs error
	)
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := errs != nil
				mu.Unlock()
				if stop || i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if errs == nil {
						errs = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// Strategies are compared side by side in every scenario.
var Strategies = []Strategy{Berth, WatermillAWS}

func endpointOption(endpoint string) []func(*awssqs.Options) {
	if endpoint == "" {
		return nil
	}
	return []func(*awssqs.Options){func(o *awssqs.Options) { o.BaseEndpoint = aws.String(endpoint) }}
}

// client returns a Client for st whose HTTP requests counter counts.
func (e *runEnv) client(st Strategy, counter *Counter) Client {
	cfg := e.aws.Copy()
	counter.Next = e.transport
	counter.LongPoll = st.LongPoll
	cfg.HTTPClient = &http.Client{Transport: counter}
	return Client{AWS: cfg, Endpoint: e.endpoint}
}

// consumer runs handler goroutines over a subscriber's channels.
type consumer struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// consume subscribes to topic st.Streams(concurrency) times and runs
// concurrency handlers in all over the channels; handle is called for
// each message, which is then acked.
func consume(sub message.Subscriber, st Strategy, topic string, concurrency int, handle func(*message.Message)) (*consumer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{cancel: cancel}
	streams := st.Streams(concurrency)
	for i := range streams {
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("subscribe: %w", err)
		}
		workers := concurrency / streams
		if i < concurrency%streams {
			workers++
		}
		for range workers {
			c.wg.Go(func() {
				for msg := range ch {
					handle(msg)
					msg.Ack()
				}
			})
		}
	}
	return c, nil
}

// stop ends the subscriptions' contexts; the handlers end when the
// subscriber closes their channels.
func (c *consumer) stop() { c.cancel() }

// wait waits for the handlers to end (after the subscriber's Close).
func (c *consumer) wait() { c.wg.Wait() }
