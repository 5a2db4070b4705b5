// Command delayed is Watermill's real-world-examples/delayed-messages on
// Berth: an OrderPlaced event makes its handler send a SendFeedbackForm
// command delayed by Watermill's delay component
// (delay.WithContext(ctx, delay.For(…)) on a delay.NewPublisher), and the
// command handler receives it once the delay has passed.
//
// The original needs three moving parts for the delay: Redis streams for
// the events and commands, watermill-sql's delayed PostgreSQL publisher
// and subscriber to hold the delayed commands, and a forwarder moving them
// from one to the other. On Berth the events and commands share one
// transport, which honours Watermill's delay metadata itself (to the
// millisecond on the SQL transports and mem://, whole seconds on SQS), so
// the port drops the forwarder and the second pub/sub. What stays: the
// event bus, the command bus on delay.NewPublisher, the two handlers and
// delay.WithContext.
//
//	BERTH_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./examples/watermill/delayed
//
// With no BERTH_URL it runs on SQLite in a temporary file. Its test checks,
// on PostgreSQL and SQLite, that every command arrives no earlier than its
// delay and soon after it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

// The messages, as in the original.
type (
	Customer struct {
		Name  string `json:"name"`
		Email string `json:"email"`
	}
	OrderPlaced struct {
		OrderID  string   `json:"order_id"`
		Customer Customer `json:"customer"`
	}
	SendFeedbackForm struct {
		OrderID string    `json:"order_id"` // not in the original: the test matches commands to orders
		To      string    `json:"to"`
		Name    string    `json:"name"`
		SentAt  time.Time `json:"sent_at"` // not in the original: when the delayed command was sent
	}
)

// config is what a run varies.
type config struct {
	URL    string
	Orders int           // OrderPlaced events to publish
	Every  time.Duration // between two events (the original: 5s)
	Delay  time.Duration // of each SendFeedbackForm (the original: 8s)
	Logger watermill.LoggerAdapter
	// Out receives the original's lines (nil: none).
	Out func(format string, args ...any)
}

// arrival is one SendFeedbackForm as its handler received it.
type arrival struct {
	SentAt, ReceivedAt time.Time
}

// run publishes cfg.Orders events and returns, by order id, when each
// delayed command was sent and received.
func run(ctx context.Context, cfg config) (map[string]arrival, error) {
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
	marshaler := cqrs.JSONMarshaler{GenerateName: cqrs.StructName}

	publisher, err := transport.OpenPublisher(ctx, cfg.URL, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	defer publisher.Close()
	// The original's sql.NewDelayedPostgreSQLPublisher: a delay publisher,
	// here on the same transport.
	delayedPublisher, err := delay.NewPublisher(publisher, delay.PublisherConfig{})
	if err != nil {
		return nil, err
	}

	eventBus, err := cqrs.NewEventBusWithConfig(publisher, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) { return p.EventName, nil },
		Marshaler:            marshaler,
		Logger:               logger,
	})
	if err != nil {
		return nil, err
	}
	commandBus, err := cqrs.NewCommandBusWithConfig(delayedPublisher, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return p.CommandName, nil },
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
	newSubscriber := func(group string) (message.Subscriber, error) {
		return transport.OpenSubscriber(ctx, cfg.URL, transport.WithLogger(logger), transport.WithConsumerGroup(group))
	}
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
	commandProcessor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return p.CommandName, nil },
		SubscriberConstructor: func(p cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
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
		arrivals = map[string]arrival{}
		all      = make(chan struct{})
	)
	err = eventProcessor.AddHandlers(cqrs.NewEventHandler("OnOrderPlacedHandler", func(ctx context.Context, event *OrderPlaced) error {
		out("💰 Received order from %v <%v>", event.Customer.Name, event.Customer.Email)
		cmd := SendFeedbackForm{OrderID: event.OrderID, To: event.Customer.Email, Name: event.Customer.Name, SentAt: time.Now()}
		// In a real world scenario, we would delay the command by a few days.
		ctx = delay.WithContext(ctx, delay.For(cfg.Delay))
		return commandBus.Send(ctx, cmd)
	}))
	if err != nil {
		return nil, err
	}
	err = commandProcessor.AddHandlers(cqrs.NewCommandHandler("OnSendFeedbackForm", func(ctx context.Context, cmd *SendFeedbackForm) error {
		out("📧 Sending feedback form to %v <%v>", cmd.Name, cmd.To)
		mu.Lock()
		defer mu.Unlock()
		if _, ok := arrivals[cmd.OrderID]; !ok {
			arrivals[cmd.OrderID] = arrival{SentAt: cmd.SentAt, ReceivedAt: time.Now()}
			if len(arrivals) == cfg.Orders {
				close(all)
			}
		}
		return nil
	}))
	if err != nil {
		return nil, err
	}

	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	defer func() {
		_ = router.Close()
		<-routerDone
	}()
	select {
	case <-router.Running():
	case err := <-routerDone:
		return nil, err
	}

	for i := range cfg.Orders {
		e := OrderPlaced{
			OrderID:  watermill.NewUUID(),
			Customer: Customer{Name: fmt.Sprintf("Customer %d", i), Email: fmt.Sprintf("customer%d@example.com", i)},
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
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		n := len(arrivals)
		mu.Unlock()
		return nil, fmt.Errorf("%d of %d feedback forms arrived: %w", n, cfg.Orders, ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	return arrivals, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	u := os.Getenv("BERTH_URL")
	if u == "" {
		dir, err := os.MkdirTemp("", "berth-delayed-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		u = "sqlite://" + filepath.Join(dir, "delayed.db")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	arrivals, err := run(ctx, config{URL: u, Orders: 3, Every: 5 * time.Second, Delay: 8 * time.Second,
		Out: func(format string, args ...any) { fmt.Printf(format+"\n", args...) }})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "delayed:", err)
		os.Exit(1)
	}
	for id, a := range arrivals {
		fmt.Printf("order %s: feedback form after %s\n", id, a.ReceivedAt.Sub(a.SentAt).Round(10*time.Millisecond))
	}
}
