package sqlqueue

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// Subscriber is a Watermill message.Subscriber (and
// message.SubscribeInitializer) over SQL queue tables, built on the shared
// pipeline: each Subscribe opens a Source on the queue of (topic,
// ConsumerGroup) and runs a receiver.Listener over it.
type Subscriber struct {
	*receiver.Subscriber
	e   *engine
	cfg SubscriberConfig

	mu        sync.Mutex
	notifier  *listener
	fleet     *fleetReporter // nil unless FleetInterval > 0
	closeOnce sync.Once
	closeErr  error
}

// NewSubscriber validates cfg and returns a subscriber reading and writing
// with d's statements, on cfg.DB or, when it is nil, on d's shared pool of
// cfg.DSN (released on Close), logging to logger (watermill.NopLogger when
// nil). Dialect packages' NewSubscriber call it with their Dialect. It does
// not touch the database until the first Subscribe or SubscribeInitialize.
func NewSubscriber(d Dialect, cfg SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if err := validateFor(d, cfg.problems(d, false)); err != nil {
		return nil, err
	}
	return withPool(d, cfg.DB, cfg.Closer, cfg.DSN, cfg.MaxOpenConns, func(db *sql.DB, closer io.Closer) (*Subscriber, error) {
		cfg.DB, cfg.Closer, cfg.logger = db, closer, logger
		return newSubscriber(d, cfg.withDefaults())
	})
}

func newSubscriber(d Dialect, cfg SubscriberConfig) (*Subscriber, error) {
	s := &Subscriber{e: newEngine(cfg.DB, d, cfg.Tables), cfg: cfg}
	ts, err := receiver.NewSubscriber(s.open, receiver.SubscriberConfig{
		Pipeline:      cfg.Pipeline,
		Logger:        cfg.logger,
		Initialize:    s.initialize,
		System:        MessagingSystem(d),
		ConsumerGroup: cfg.ConsumerGroup,
	})
	if err != nil {
		return nil, err
	}
	s.Subscriber = ts
	if cfg.FleetInterval > 0 {
		if s.fleet, err = newFleetReporter(s.e, fleetListeners{ts}, cfg); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ReceiverMember adapts a pipeline subscriber to the fleet reporter: its
// listeners' states, and Pause/Resume of the listeners of a name.
func ReceiverMember(s *receiver.Subscriber) FleetMember { return fleetListeners{s} }

type fleetListeners struct{ *receiver.Subscriber }

func (f fleetListeners) PauseListener(ctx context.Context, name string) error {
	var errs []error
	for _, l := range f.Listeners() {
		if l.Name() == name {
			errs = append(errs, l.Pause(ctx))
		}
	}
	return errors.Join(errs...)
}

func (f fleetListeners) ResumeListener(name string) {
	for _, l := range f.Listeners() {
		if l.Name() == name {
			l.Resume()
		}
	}
}

// Stats returns the subscriber's round-trip and row counts, summed over
// its sources.
func (s *Subscriber) Stats() Stats { return s.e.ctrs.Snapshot() }

// Queue returns the queue a Subscribe to topic consumes.
func (s *Subscriber) Queue(topic string) Queue { return s.e.queue(topic, s.cfg.ConsumerGroup) }

func (s *Subscriber) initialize(topic string) error {
	return s.e.ensureQueue(context.Background(), s.Queue(topic), true)
}

func (s *Subscriber) open(ctx context.Context, topic string) (transport.Source, error) {
	q := s.Queue(topic)
	if err := s.e.ensureQueue(ctx, q, true); err != nil {
		return nil, err
	}
	if n, ok := s.e.d.(Notifier); ok {
		s.mu.Lock()
		if s.notifier == nil {
			s.notifier = acquireListener(s.cfg.DB, n, s.cfg.logger)
		}
		s.mu.Unlock()
	}
	s.fleet.start()
	return newSource(s.e, s.cfg, q, true), nil
}

// NewSource opens a source on the queue of (topic, cfg.ConsumerGroup) with
// d's statements, outside any subscriber: for tools, tests and custom
// pipelines. cfg.DB is required (a source opens no pool). The caller closes
// it.
func NewSource(ctx context.Context, d Dialect, cfg SubscriberConfig, topic string, logger watermill.LoggerAdapter) (*Source, error) {
	if err := validateFor(d, cfg.problems(d, true)); err != nil {
		return nil, err
	}
	cfg.logger = logger
	cfg = cfg.withDefaults()
	e := newEngine(cfg.DB, d, cfg.Tables)
	q := e.queue(topic, cfg.ConsumerGroup)
	if err := e.ensureQueue(ctx, q, true); err != nil {
		return nil, err
	}
	return newSource(e, cfg, q, false), nil
}

// Stats returns the round-trip and row counts of the source's engine.
func (s *Source) Stats() Stats { return s.e.ctrs.Snapshot() }

// Close implements message.Subscriber: listeners drain and release their
// prefetched rows, sources close, the wake-up listener stops, then Closer
// is closed. Idempotent; waits.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		ferr := s.fleet.close() // before the listeners: a paused one stays paused as it drains
		s.closeErr = errors.Join(s.Subscriber.Close(), ferr)
		s.mu.Lock()
		n := s.notifier
		s.notifier = nil
		s.mu.Unlock()
		if n != nil {
			releaseListener(s.cfg.DB, n)
		}
		if s.cfg.Closer != nil {
			if err := s.cfg.Closer.Close(); err != nil && s.closeErr == nil {
				s.closeErr = err
			}
		}
	})
	return s.closeErr
}
