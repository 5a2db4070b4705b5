// Command cqrs is Watermill's basic/5-cqrs-protobuf example on Berth: the
// same command and event handlers, the same command and event buses, with
// Berth's publisher and subscribers in place of RabbitMQ's (and Watermill's
// JSON marshaler in place of protobuf, which would need generated code).
//
// Commands go to one queue per command type, consumed once. Events go to a
// topic per event type, and every event handler consumes them as its own
// consumer group (the handler's name), so each handler sees every event.
// The port's one addition: the publisher declares those groups (URL
// groups=topic:group,…), so a handler that starts late misses nothing.
//
//	BERTH_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./examples/watermill/cqrs
//
// With no BERTH_URL it runs on SQLite in a temporary file. What the example
// shows — every event reaches every handler, whichever starts first — is
// asserted by its test, on PostgreSQL and SQLite, with the handlers started
// in a random order up to two seconds after the first command.
package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// The messages: commands and events, as in the original's messages.proto.
type (
	// BookRoom is a command.
	BookRoom struct {
		RoomID    string    `json:"room_id"`
		GuestName string    `json:"guest_name"`
		StartDate time.Time `json:"start_date"`
		EndDate   time.Time `json:"end_date"`
	}
	// RoomBooked is an event.
	RoomBooked struct {
		ReservationID string    `json:"reservation_id"`
		RoomID        string    `json:"room_id"`
		GuestName     string    `json:"guest_name"`
		Price         int64     `json:"price"`
		StartDate     time.Time `json:"start_date"`
		EndDate       time.Time `json:"end_date"`
	}
	// OrderBeer is a command.
	OrderBeer struct {
		RoomID string `json:"room_id"`
		Count  int64  `json:"count"`
	}
	// BeerOrdered is an event.
	BeerOrdered struct {
		RoomID string `json:"room_id"`
		Count  int64  `json:"count"`
	}
)

// BookRoomHandler handles BookRoom and emits RoomBooked.
type BookRoomHandler struct{ eventBus *cqrs.EventBus }

// Handle implements the command handler.
func (b BookRoomHandler) Handle(ctx context.Context, cmd *BookRoom) error {
	return b.eventBus.Publish(ctx, &RoomBooked{
		ReservationID: watermill.NewUUID(),
		RoomID:        cmd.RoomID,
		GuestName:     cmd.GuestName,
		Price:         (rand.Int64N(40) + 1) * 10,
		StartDate:     cmd.StartDate,
		EndDate:       cmd.EndDate,
	})
}

// OrderBeerOnRoomBooked handles RoomBooked and sends OrderBeer.
type OrderBeerOnRoomBooked struct{ commandBus *cqrs.CommandBus }

// Handle implements the event handler.
func (o OrderBeerOnRoomBooked) Handle(ctx context.Context, event *RoomBooked) error {
	return o.commandBus.Send(ctx, &OrderBeer{RoomID: event.RoomID, Count: rand.Int64N(10) + 1})
}

// OrderBeerHandler handles OrderBeer and emits BeerOrdered; one time in
// ten there is no beer left and the command is retried.
type OrderBeerHandler struct{ eventBus *cqrs.EventBus }

// Handle implements the command handler.
func (o OrderBeerHandler) Handle(ctx context.Context, cmd *OrderBeer) error {
	if rand.IntN(10) == 0 {
		return fmt.Errorf("no beer left for room %s, please try later", cmd.RoomID)
	}
	return o.eventBus.Publish(ctx, &BeerOrdered{RoomID: cmd.RoomID, Count: cmd.Count})
}

// BookingsFinancialReport is a read model of what bookings earn. It
// deduplicates by reservation, as the original does for brokers without
// exactly-once delivery.
type BookingsFinancialReport struct {
	mu          sync.Mutex
	handled     map[string]struct{}
	totalCharge int64
}

// NewBookingsFinancialReport returns an empty report.
func NewBookingsFinancialReport() *BookingsFinancialReport {
	return &BookingsFinancialReport{handled: map[string]struct{}{}}
}

// Handle implements the event handler.
func (b *BookingsFinancialReport) Handle(_ context.Context, event *RoomBooked) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.handled[event.ReservationID]; ok {
		return nil
	}
	b.handled[event.ReservationID] = struct{}{}
	b.totalCharge += event.Price
	return nil
}

// config is what a run varies.
type config struct {
	URL      string        // the transport, for both sides
	Bookings int           // BookRoom commands to send
	Interval time.Duration // between two commands (the original: 1s)
	// Starts delays the start of each handler's router (by handler name,
	// "commands" for the command handlers' router) after the first command;
	// a handler missing from it starts at once.
	Starts map[string]time.Duration
	Logger watermill.LoggerAdapter
}

// eventHandlers are the event handlers' names: each is a consumer group.
var eventHandlers = []string{"OrderBeerOnRoomBooked", "LogBeerOrdered", "BookingsFinancialReport"}

// seen records what each handler handled, for the test.
type seen struct {
	mu       sync.Mutex
	byName   map[string]map[string]int // handler → room → times handled
	report   *BookingsFinancialReport
	changed  chan struct{}
	bookings int
}

func (s *seen) add(handler, room string) {
	s.mu.Lock()
	m := s.byName[handler]
	if m == nil {
		m = map[string]int{}
		s.byName[handler] = m
	}
	m[room]++
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// done reports whether every handler handled every room.
func (s *seen) done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range append([]string{"BookRoomHandler", "OrderBeerHandler"}, eventHandlers...) {
		if len(s.byName[h]) < s.bookings {
			return false
		}
	}
	return true
}

// counts returns how many rooms each handler handled.
func (s *seen) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := map[string]int{}
	for h, m := range s.byName {
		c[h] = len(m)
	}
	return c
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

// run sends cfg.Bookings BookRoom commands and runs every handler, each
// handler's router started after its delay, until every handler has handled
// every booking (or ctx ends). It returns what each handler saw.
func run(ctx context.Context, cfg config) (*seen, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &seen{byName: map[string]map[string]int{}, report: NewBookingsFinancialReport(), changed: make(chan struct{}, 1), bookings: cfg.Bookings}

	marshaler := cqrs.JSONMarshaler{GenerateName: cqrs.StructName}
	eventsTopic := func(name string) string { return "events." + name }
	commandsTopic := func(name string) string { return "commands." + name }

	// The constructors: Berth's publisher, and a subscriber per handler
	// (commands on the default queue, each event handler as its group).
	// The one addition to the original: the publisher declares each event
	// handler's consumer group on its topic (URL groups=topic:group,…), so
	// that a handler whose subscriber starts after the first event still
	// gets it (docs/consumer-groups.md). Without it, a group receives what
	// is published after it first subscribes, plus what was parked while
	// the topic had no subscriber at all.
	pubURL, err := declareGroups(cfg.URL, map[string][]string{
		eventsTopic("RoomBooked"):  {"OrderBeerOnRoomBooked", "BookingsFinancialReport"},
		eventsTopic("BeerOrdered"): {"LogBeerOrdered"},
	})
	if err != nil {
		return nil, err
	}
	publisher, err := transport.OpenPublisher(ctx, pubURL, transport.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	defer publisher.Close()
	var subs []message.Subscriber
	defer func() {
		for _, sub := range subs {
			_ = sub.Close()
		}
	}()
	newSubscriber := func(group string) (message.Subscriber, error) {
		sub, err := transport.OpenSubscriber(ctx, cfg.URL, transport.WithLogger(logger), transport.WithConsumerGroup(group))
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
		return sub, nil
	}

	commandBus, err := cqrs.NewCommandBusWithConfig(publisher, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) {
			return commandsTopic(p.CommandName), nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}
	eventBus, err := cqrs.NewEventBusWithConfig(publisher, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) {
			return eventsTopic(p.EventName), nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}

	// One router for the command handlers and one per event handler, so
	// that each starts when its delay says.
	newRouter := func() (*message.Router, error) {
		r, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			return nil, err
		}
		r.AddMiddleware(middleware.Recoverer)
		return r, nil
	}
	routers := map[string]*message.Router{}

	commandRouter, err := newRouter()
	if err != nil {
		return nil, err
	}
	routers["commands"] = commandRouter
	commandSubscriber, err := newSubscriber("")
	if err != nil {
		return nil, err
	}
	commandProcessor, err := cqrs.NewCommandProcessorWithConfig(commandRouter, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return commandsTopic(p.CommandName), nil
		},
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return commandSubscriber, nil // commands have a topic each: one subscriber serves them all
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}
	err = commandProcessor.AddHandlers(
		cqrs.NewCommandHandler("BookRoomHandler", func(ctx context.Context, cmd *BookRoom) error {
			if err := (BookRoomHandler{eventBus}).Handle(ctx, cmd); err != nil {
				return err
			}
			s.add("BookRoomHandler", cmd.RoomID)
			return nil
		}),
		cqrs.NewCommandHandler("OrderBeerHandler", func(ctx context.Context, cmd *OrderBeer) error {
			if err := (OrderBeerHandler{eventBus}).Handle(ctx, cmd); err != nil {
				return err
			}
			s.add("OrderBeerHandler", cmd.RoomID)
			return nil
		}),
	)
	if err != nil {
		return nil, err
	}

	eventHandler := map[string]cqrs.EventHandler{
		"OrderBeerOnRoomBooked": cqrs.NewEventHandler("OrderBeerOnRoomBooked", func(ctx context.Context, e *RoomBooked) error {
			if err := (OrderBeerOnRoomBooked{commandBus}).Handle(ctx, e); err != nil {
				return err
			}
			s.add("OrderBeerOnRoomBooked", e.RoomID)
			return nil
		}),
		"LogBeerOrdered": cqrs.NewEventHandler("LogBeerOrdered", func(_ context.Context, e *BeerOrdered) error {
			logger.Info("Beer ordered", watermill.LogFields{"room_id": e.RoomID})
			s.add("LogBeerOrdered", e.RoomID)
			return nil
		}),
		"BookingsFinancialReport": cqrs.NewEventHandler("BookingsFinancialReport", func(ctx context.Context, e *RoomBooked) error {
			if err := s.report.Handle(ctx, e); err != nil {
				return err
			}
			s.add("BookingsFinancialReport", e.RoomID)
			return nil
		}),
	}
	for _, name := range eventHandlers {
		r, err := newRouter()
		if err != nil {
			return nil, err
		}
		routers[name] = r
		processor, err := cqrs.NewEventProcessorWithConfig(r, cqrs.EventProcessorConfig{
			GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
				return eventsTopic(p.EventName), nil
			},
			SubscriberConstructor: func(p cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
				return newSubscriber(p.HandlerName) // the handler's own consumer group
			},
			Marshaler: marshaler,
			Logger:    logger,
		})
		if err != nil {
			return nil, err
		}
		if err := processor.AddHandlers(eventHandler[name]); err != nil {
			return nil, err
		}
	}

	// Traffic first, then each router after its delay.
	var wg sync.WaitGroup
	errs := make(chan error, len(routers)+1)
	wg.Go(func() {
		for i := 1; i <= cfg.Bookings; i++ {
			err := commandBus.Send(ctx, &BookRoom{
				RoomID:    fmt.Sprint(i),
				GuestName: "John",
				StartDate: time.Now(),
				EndDate:   time.Now().Add(72 * time.Hour),
			})
			if err != nil {
				errs <- fmt.Errorf("send BookRoom %d: %w", i, err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(cfg.Interval):
			}
		}
	})
	for name, r := range routers {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(cfg.Starts[name]):
			}
			if err := r.Run(ctx); err != nil {
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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	u := os.Getenv("BERTH_URL")
	if u == "" {
		dir, err := os.MkdirTemp("", "berth-cqrs-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		u = "sqlite://" + filepath.Join(dir, "cqrs.db")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := run(ctx, config{URL: u, Bookings: 10, Interval: 100 * time.Millisecond, Logger: watermill.NewStdLogger(false, false)})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "cqrs:", err)
		os.Exit(1)
	}
	fmt.Printf("handled: %v; booked rooms for $%d\n", s.counts(), s.report.totalCharge)
}
