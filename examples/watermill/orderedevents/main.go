// Command orderedevents is Watermill's basic/6-cqrs-ordered-events example
// on Berth: the same commands, events, handlers, read models and marshaler,
// with Berth's publisher and subscribers in place of Kafka's.
//
// An email subscription service: Subscribe, UpdateEmail and Unsubscribe
// commands go to one topic, "commands", read by each command handler as its
// own consumer group; the events they publish go to one topic, "events",
// read by two event groups (SubscriberReadModel, ActivityTimelineReadModel),
// each a consumer group. The example exists to show that each group handles
// one subscriber's events in the order they were published — otherwise a
// SubscriberSubscribed handled after SubscriberUnsubscribed leaves the
// subscriber subscribed — while different subscribers run in parallel. On
// Kafka that is the partition key; on Berth it is the ordering key
// (docs/ordering.md).
//
// What changed from the original, all in how the publisher and subscribers
// are built (newPublisher, newSubscriber):
//
//   - transport.OpenPublisher and transport.OpenSubscriber with
//     transport.WithConsumerGroup, for kafka.NewPublisher and
//     kafka.NewSubscriber with ConsumerGroup.
//   - The publisher sets each message's ordering key (berth_ordering_key)
//     from GenerateKafkaPartitionKey, the function the original gives
//     kafka.NewWithPartitioningMarshaler.
//   - The publisher declares every consumer group (URL groups=topic:group,…),
//     so a group whose subscriber starts after the first publish still gets
//     every message, as a new Kafka consumer group reading from the oldest
//     offset would.
//
// activity.go, message.go, subscribers.go and proto/messages.proto are the
// original's files unchanged (Watermill c9b951f7); messages.pb.go is
// generated from the same proto by protoc-gen-go v1.36.8 (the original's,
// by v1.31.0, uses protoimpl API that staticcheck reports as deprecated).
// main.go keeps the original's handlers and wiring; to run as a
// test it takes its settings from a config, sends a bounded amount of
// traffic, gives the command handlers and each event group a router of
// their own (so that each starts when the test says) and records what was
// published and handled.
//
//	BERTH_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./examples/watermill/orderedevents
//
// With no BERTH_URL it runs on SQLite in a temporary file. Its test asserts
// what the example shows, on PostgreSQL and SQLite, with the routers started
// in every order up to two seconds after the first command: every event
// reaches both groups, and each group handles each subscriber's events in
// publish order.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/berth-go/berth/transport"
	_ "github.com/berth-go/berth/transport/all"
)

// The topics, as in the original: one for all commands and one for all
// events, to keep their order.
const (
	commandsTopic = "commands"
	eventsTopic   = "events"
)

// The consumer groups: each command handler (the original's
// ConsumerGroup: params.HandlerName) and each event group
// (params.EventGroupName).
var (
	commandHandlers = []string{"SubscribeHandler", "UnsubscribeHandler", "UpdateEmailHandler"}
	eventGroups     = []string{"SubscriberReadModel", "ActivityTimelineReadModel"}
)

// newPublisher is the port's publisher, in place of kafka.NewPublisher
// with kafka.NewWithPartitioningMarshaler(GenerateKafkaPartitionKey).
func newPublisher(ctx context.Context, rawURL string, logger watermill.LoggerAdapter) (message.Publisher, error) {
	u, err := declareGroups(rawURL, map[string][]string{
		commandsTopic: commandHandlers,
		eventsTopic:   eventGroups,
	})
	if err != nil {
		return nil, err
	}
	pub, err := transport.OpenPublisher(ctx, u, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	return orderingKeyPublisher{Publisher: pub, key: GenerateKafkaPartitionKey}, nil
}

// newSubscriber is the port's subscriber for one consumer group, in place
// of kafka.NewSubscriber with ConsumerGroup: group.
func newSubscriber(ctx context.Context, rawURL, group string, logger watermill.LoggerAdapter) (message.Subscriber, error) {
	return transport.OpenSubscriber(ctx, rawURL, transport.WithLogger(logger), transport.WithConsumerGroup(group))
}

// orderingKeyPublisher sets each message's ordering key to what key
// returns, as kafka.NewWithPartitioningMarshaler sets the partition key:
// a consumer group then handles the messages of one key one at a time, in
// publish order (docs/ordering.md).
type orderingKeyPublisher struct {
	message.Publisher
	key func(topic string, msg *message.Message) (string, error)
}

// Publish implements message.Publisher.
func (p orderingKeyPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		k, err := p.key(topic, m)
		if err != nil {
			return fmt.Errorf("ordering key of message %s: %w", m.UUID, err)
		}
		m.Metadata.Set(transport.MetadataOrderingKey, k)
	}
	return p.Publisher.Publish(topic, msgs...)
}

// declareGroups returns base with groups=topic:group,… for groups.
func declareGroups(base string, groups map[string][]string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	var pairs []string
	for topic, gs := range groups {
		for _, g := range gs {
			pairs = append(pairs, topic+":"+g)
		}
	}
	sort.Strings(pairs)
	q := u.Query()
	q.Set("groups", strings.Join(pairs, ","))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// config is what a run varies.
type config struct {
	URL string // the transport, for both sides
	// Subscribers is how many subscribers the traffic simulates (each:
	// Subscribe, UpdateEmail, and for every third Unsubscribe); the
	// original goes on forever.
	Subscribers int
	Interval    time.Duration // between two commands (the original: 500ms)
	// Starts delays the start of each router ("commands" for the command
	// handlers', else the event group's name) after the first command; a
	// router missing from it starts at once.
	Starts map[string]time.Duration
	Logger watermill.LoggerAdapter
}

// wantEvents is how many events the traffic of n subscribers makes.
func wantEvents(n int) int { return 2*n + (n+2)/3 }

// run sends the commands of cfg.Subscribers subscribers and runs every
// handler, each router started after its delay, until both event groups
// have handled every event (or ctx ends). It returns what was published
// and handled.
func run(ctx context.Context, cfg config) (*seen, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// We are decorating ProtobufMarshaler to add extra metadata to the message.
	cqrsMarshaler := CqrsMarshalerDecorator{
		cqrs.ProtoMarshaler{
			// It will generate topic names based on the event/command type.
			// So for example, for "RoomBooked" name will be "RoomBooked".
			GenerateName: cqrs.StructName,
		},
	}
	subscribersReadModel := NewSubscriberReadModel()
	activityReadModel := NewActivityTimelineModel()
	s := newSeen(cqrsMarshaler, wantEvents(cfg.Subscribers), subscribersReadModel, activityReadModel)

	publisher, err := newPublisher(ctx, cfg.URL, logger)
	if err != nil {
		return nil, err
	}
	defer publisher.Close()
	publisher = s.recordPublished(publisher) // for the test
	var subs []message.Subscriber
	defer func() {
		for _, sub := range subs {
			_ = sub.Close()
		}
	}()
	subscriberFor := func(group string) (message.Subscriber, error) {
		sub, err := newSubscriber(ctx, cfg.URL, group, logger)
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
		return sub, nil
	}

	// CQRS is built on messages router; here one router for the command
	// handlers and one per event group, so that each starts when its
	// delay says.
	routers := map[string]*message.Router{}
	newRouter := func(name string) (*message.Router, error) {
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			return nil, err
		}
		router.AddMiddleware(middleware.Recoverer)
		router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				slog.Debug("Received message", "metadata", msg.Metadata)
				return h(msg)
			}
		})
		if name != "commands" {
			router.AddMiddleware(s.recordHandled(name)) // for the test
		}
		routers[name] = router
		return router, nil
	}

	commandBus, err := cqrs.NewCommandBusWithConfig(publisher, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(params cqrs.CommandBusGeneratePublishTopicParams) (string, error) {
			// We are using one topic for all commands to maintain the order of commands.
			return commandsTopic, nil
		},
		Marshaler: cqrsMarshaler,
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}

	eventBus, err := cqrs.NewEventBusWithConfig(publisher, cqrs.EventBusConfig{
		GeneratePublishTopic: func(params cqrs.GenerateEventPublishTopicParams) (string, error) {
			// We are using one topic for all events to maintain the order of events.
			return eventsTopic, nil
		},
		Marshaler: cqrsMarshaler,
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}

	commandRouter, err := newRouter("commands")
	if err != nil {
		return nil, err
	}
	commandProcessor, err := cqrs.NewCommandProcessorWithConfig(
		commandRouter,
		cqrs.CommandProcessorConfig{
			GenerateSubscribeTopic: func(params cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
				return commandsTopic, nil
			},
			SubscriberConstructor: func(params cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
				return subscriberFor(params.HandlerName)
			},
			Marshaler: cqrsMarshaler,
			Logger:    logger,
		},
	)
	if err != nil {
		return nil, err
	}
	err = commandProcessor.AddHandlers(
		cqrs.NewCommandHandler("SubscribeHandler", SubscribeHandler{eventBus}.Handle),
		cqrs.NewCommandHandler("UnsubscribeHandler", UnsubscribeHandler{eventBus}.Handle),
		cqrs.NewCommandHandler("UpdateEmailHandler", UpdateEmailHandler{eventBus}.Handle),
	)
	if err != nil {
		return nil, err
	}

	// All messages from a group will have one subscription.
	// When message arrives, Watermill will match it with the correct handler.
	groupHandlers := map[string][]cqrs.GroupEventHandler{
		"SubscriberReadModel": {
			cqrs.NewGroupEventHandler(subscribersReadModel.OnSubscribed),
			cqrs.NewGroupEventHandler(subscribersReadModel.OnUnsubscribed),
			cqrs.NewGroupEventHandler(subscribersReadModel.OnEmailUpdated),
		},
		"ActivityTimelineReadModel": {
			cqrs.NewGroupEventHandler(activityReadModel.OnSubscribed),
			cqrs.NewGroupEventHandler(activityReadModel.OnUnsubscribed),
			cqrs.NewGroupEventHandler(activityReadModel.OnEmailUpdated),
		},
	}
	for _, group := range eventGroups {
		router, err := newRouter(group)
		if err != nil {
			return nil, err
		}
		eventProcessor, err := cqrs.NewEventGroupProcessorWithConfig(
			router,
			cqrs.EventGroupProcessorConfig{
				GenerateSubscribeTopic: func(params cqrs.EventGroupProcessorGenerateSubscribeTopicParams) (string, error) {
					return eventsTopic, nil
				},
				SubscriberConstructor: func(params cqrs.EventGroupProcessorSubscriberConstructorParams) (message.Subscriber, error) {
					return subscriberFor(params.EventGroupName)
				},
				Marshaler: cqrsMarshaler,
				Logger:    logger,
			},
		)
		if err != nil {
			return nil, err
		}
		if err := eventProcessor.AddHandlersGroup(group, groupHandlers[group]...); err != nil {
			return nil, err
		}
	}

	// Traffic first, then each router after its delay.
	var wg sync.WaitGroup
	errs := make(chan error, len(routers)+1)
	wg.Go(func() {
		if err := simulateTraffic(ctx, commandBus, cfg.Subscribers, cfg.Interval); err != nil {
			errs <- err
		}
	})
	for name, router := range routers {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(cfg.Starts[name]):
			}
			if err := router.Run(ctx); err != nil {
				errs <- fmt.Errorf("router %s: %w", name, err)
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	for !s.done() {
		select {
		case err := <-errs:
			return s, err
		case <-ctx.Done():
			return s, ctx.Err()
		case <-s.changed:
		}
	}
	return s, nil
}

// simulateTraffic is the original's, for n subscribers and with interval
// for its 500 ms sleeps; it returns the first failed send (the original
// logs it and goes on).
func simulateTraffic(ctx context.Context, commandBus *cqrs.CommandBus, n int, interval time.Duration) error {
	sleep := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
			return nil
		}
	}
	for i := 0; i < n; i++ {
		subscriberID := watermill.NewUUID()

		err := commandBus.Send(ctx, &Subscribe{
			Metadata:     GenerateMessageMetadata(subscriberID),
			SubscriberId: subscriberID,
			Email:        fmt.Sprintf("user%d@example.com", i),
		})
		if err != nil {
			return fmt.Errorf("send Subscribe: %w", err)
		}
		if err := sleep(); err != nil {
			return nil
		}

		err = commandBus.Send(ctx, &UpdateEmail{
			Metadata:     GenerateMessageMetadata(subscriberID),
			SubscriberId: subscriberID,
			NewEmail:     fmt.Sprintf("updated%d@example.com", i),
		})
		if err != nil {
			return fmt.Errorf("send UpdateEmail: %w", err)
		}
		if err := sleep(); err != nil {
			return nil
		}

		if i%3 == 0 {
			err = commandBus.Send(ctx, &Unsubscribe{
				Metadata:     GenerateMessageMetadata(subscriberID),
				SubscriberId: subscriberID,
			})
			if err != nil {
				return fmt.Errorf("send Unsubscribe: %w", err)
			}
		}
		if err := sleep(); err != nil {
			return nil
		}
	}
	return nil
}

type SubscribeHandler struct {
	eventBus *cqrs.EventBus
}

func (h SubscribeHandler) Handle(ctx context.Context, cmd *Subscribe) error {
	return h.eventBus.Publish(ctx, &SubscriberSubscribed{
		Metadata:     GenerateMessageMetadata(cmd.SubscriberId),
		SubscriberId: cmd.SubscriberId,
		Email:        cmd.Email,
	})
}

type UnsubscribeHandler struct {
	eventBus *cqrs.EventBus
}

func (h UnsubscribeHandler) Handle(ctx context.Context, cmd *Unsubscribe) error {
	return h.eventBus.Publish(ctx, &SubscriberUnsubscribed{
		Metadata:     GenerateMessageMetadata(cmd.SubscriberId),
		SubscriberId: cmd.SubscriberId,
	})
}

type UpdateEmailHandler struct {
	eventBus *cqrs.EventBus
}

func (h UpdateEmailHandler) Handle(ctx context.Context, cmd *UpdateEmail) error {
	return h.eventBus.Publish(ctx, &SubscriberEmailUpdated{
		Metadata:     GenerateMessageMetadata(cmd.SubscriberId),
		SubscriberId: cmd.SubscriberId,
		NewEmail:     cmd.NewEmail,
	})
}

func main() {
	slog.SetLogLoggerLevel(slog.LevelDebug)

	logger := watermill.NewSlogLoggerWithLevelMapping(nil, map[slog.Level]slog.Level{
		slog.LevelInfo: slog.LevelDebug,
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	u := os.Getenv("BERTH_URL")
	if u == "" {
		dir, err := os.MkdirTemp("", "berth-orderedevents-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		u = "sqlite://" + filepath.Join(dir, "orderedevents.db")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	slog.Info("Starting service")

	s, err := run(ctx, config{URL: u, Subscribers: 6, Interval: 100 * time.Millisecond, Logger: logger})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "orderedevents:", err)
		os.Exit(1)
	}
	fmt.Printf("events: %d published, handled %v; %d subscribers left\n",
		len(s.publishedEvents()), s.handledCounts(), s.subscribers.GetSubscriberCount())
}
