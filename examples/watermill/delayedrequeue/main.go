// Command delayedrequeue is Watermill's real-world-examples/delayed-requeue
// on Berth: an OrderPlaced handler that fails (every tenth order has no
// order id) has its message requeued with a delay that grows on each
// failure (middleware.DelayOnError), while the other orders flow.
//
// The original keeps the events on Redis streams and the requeued
// messages in watermill-sql's delayed PostgreSQL tables, wired by
// sql.NewPostgreSQLDelayedRequeuer: a PoisonQueue middleware publishing
// the failed message to a "requeue" topic of the delayed publisher,
// DelayOnError setting the delay on it, and a components/requeuer reading
// "requeue" and publishing each message back to its original topic. On
// Berth, which honours Watermill's delay metadata when it publishes, the
// requeue topic is one more Berth topic: the port builds the same three
// parts (PoisonQueue, DelayOnError, requeuer.NewRequeuer) on Berth's
// publisher and subscriber, and changes nothing else.
//
//	BERTH_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./examples/watermill/delayedrequeue
//
// With no BERTH_URL it runs on SQLite in a temporary file. Its test checks,
// on PostgreSQL and SQLite, that the failing order comes back after each
// delay, the delay doubling, and that the other orders are handled once.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/requeuer"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

// OrderPlaced is the original's event, less the fake customer, address
// and products it fills with gofakeit. Seq is not in the original: the
// test tells the orders without an id apart by it.
type OrderPlaced struct {
	OrderID string `json:"order_id"`
	Seq     int    `json:"seq"`
}

// config is what a run varies.
type config struct {
	URL    string
	Orders int           // OrderPlaced events to publish
	Every  time.Duration // between two events (the original: 1s)
	BadAt  int           // the order with no order id: every BadAt-th (the original: 10)
	// Retry is the requeuer's delays (the original: 10s, 3min, ×2).
	Retry middleware.DelayOnError
	// Attempts ends the run once the first bad order was handled this
	// many times.
	Attempts int
	Logger   watermill.LoggerAdapter
	// Out receives the original's lines (nil: none).
	Out func(format string, args ...any)
}

// attempt is one run of the handler.
type attempt struct {
	Seq     int
	At      time.Time
	Retries int // the requeuer's count on the message (requeuer.RetriesKey)
}

// requeueTopic is the original's default (sql.DelayedRequeuerConfig).
const requeueTopic = "requeue"

// run publishes the orders and returns every handler run, in order, once
// the first bad order was handled cfg.Attempts times and every good one
// once.
func run(ctx context.Context, cfg config) ([]attempt, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	out := cfg.Out
	if out == nil {
		out = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	publisher, err := transport.OpenPublisher(ctx, cfg.URL, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	defer publisher.Close()
	newSubscriber := func(group string) (message.Subscriber, error) {
		return transport.OpenSubscriber(ctx, cfg.URL, transport.WithLogger(logger), transport.WithConsumerGroup(group))
	}

	// sql.NewPostgreSQLDelayedRequeuer's parts, on Berth.
	poisonQueue, err := middleware.PoisonQueue(publisher, requeueTopic)
	if err != nil {
		return nil, err
	}
	requeueSubscriber, err := newSubscriber("requeuer")
	if err != nil {
		return nil, err
	}
	defer requeueSubscriber.Close()
	requeue, err := requeuer.NewRequeuer(requeuer.Config{
		Subscriber:     requeueSubscriber,
		SubscribeTopic: requeueTopic,
		Publisher:      publisher,
		GeneratePublishTopic: func(p requeuer.GeneratePublishTopicParams) (string, error) {
			topic := p.Message.Metadata.Get(middleware.PoisonedTopicKey)
			if topic == "" {
				return "", errors.New("missing topic in metadata")
			}
			return topic, nil
		},
	}, logger)
	if err != nil {
		return nil, err
	}

	marshaler := cqrs.JSONMarshaler{GenerateName: cqrs.StructName}
	eventBus, err := cqrs.NewEventBusWithConfig(publisher, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) { return p.EventName, nil },
		Marshaler:            marshaler,
		Logger:               logger,
	})
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return nil, err
	}
	router.AddMiddleware(poisonQueue, cfg.Retry.Middleware)
	eventProcessor, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) { return p.EventName, nil },
		SubscriberConstructor: func(p cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return newSubscriber(p.HandlerName)
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}

	var (
		mu       sync.Mutex
		attempts []attempt
		good     = map[int]bool{}
		done     = make(chan struct{})
		closed   bool
	)
	err = eventProcessor.AddHandlers(cqrs.NewEventHandler("OnOrderPlacedHandler", func(ctx context.Context, event *OrderPlaced) error {
		retries, _ := strconv.Atoi(cqrs.OriginalMessageFromCtx(ctx).Metadata.Get(requeuer.RetriesKey))
		mu.Lock()
		attempts = append(attempts, attempt{Seq: event.Seq, At: time.Now(), Retries: retries})
		if event.OrderID != "" {
			good[event.Seq] = true
		}
		bad := 0
		for _, a := range attempts {
			if a.Seq == cfg.BadAt-1 {
				bad++
			}
		}
		if !closed && bad >= cfg.Attempts && len(good) == cfg.Orders-cfg.Orders/cfg.BadAt {
			closed = true
			close(done)
		}
		mu.Unlock()
		if event.OrderID == "" {
			out("ERROR: Received order placed without order_id")
			return errors.New("empty order_id")
		}
		out("Received order placed: %s", event.OrderID)
		return nil
	}))
	if err != nil {
		return nil, err
	}

	requeueDone := make(chan error, 1)
	go func() { requeueDone <- requeue.Run(ctx) }()
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	defer func() {
		cancel()
		_ = router.Close()
		<-routerDone
		<-requeueDone
	}()
	select {
	case <-router.Running():
	case err := <-routerDone:
		return nil, err
	}

	for i := range cfg.Orders {
		e := OrderPlaced{OrderID: watermill.NewUUID(), Seq: i}
		if (i+1)%cfg.BadAt == 0 {
			e.OrderID = ""
		}
		if err := eventBus.Publish(ctx, e); err != nil {
			return nil, err
		}
		select {
		case <-time.After(cfg.Every):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		return nil, fmt.Errorf("%d handler runs, %d of the good orders: %w", len(attempts), len(good), ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]attempt(nil), attempts...), nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	u := os.Getenv("BERTH_URL")
	if u == "" {
		dir, err := os.MkdirTemp("", "berth-delayedrequeue-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		u = "sqlite://" + filepath.Join(dir, "requeue.db")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	attempts, err := run(ctx, config{URL: u, Orders: 20, Every: time.Second, BadAt: 10, Attempts: 3,
		Retry: middleware.DelayOnError{InitialInterval: 10 * time.Second, MaxInterval: 3 * time.Minute, Multiplier: 2},
		Out:   func(format string, args ...any) { fmt.Printf(format+"\n", args...) }})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "delayedrequeue:", err)
		os.Exit(1)
	}
	for _, a := range attempts {
		fmt.Printf("order %d handled at %s (requeued %d times)\n", a.Seq, a.At.Format(time.TimeOnly), a.Retries)
	}
}
