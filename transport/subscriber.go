package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// SourceFactory opens the source for one Subscribe(ctx, topic) call.
type SourceFactory func(ctx context.Context, topic string) (Source, error)

// SubscriberConfig configures the generic subscriber every transport builds
// on.
type SubscriberConfig struct {
	// Pipeline configures each listener's receive pipeline.
	Pipeline PipelineConfig
	// NewReceiver builds receiver stages (receiver.New). Required.
	NewReceiver ReceiverFactory
	// Logger; nil discards.
	Logger watermill.LoggerAdapter
	// Initialize, when set, is what SubscribeInitialize does (create the
	// queue or table ahead of the first Subscribe).
	Initialize func(topic string) error
	// Name, when set, names listeners as Name(topic). Defaults to the
	// topic, or "topic/ConsumerGroup" with a consumer group.
	Name func(topic string) string
	// System is the transport's messaging.system (see Destination.System),
	// reported by MessagingSystem and each listener's Destination.
	// Defaults to "" (unknown).
	System string
	// ConsumerGroup is the consumer group every listener consumes as, for
	// Destination.ConsumerGroup and the default Name. Defaults to "" (none).
	ConsumerGroup string
	// DestinationName, when set, maps a topic to the Destination.Name of
	// its listener (e.g. the queue it is consumed from). Defaults to the
	// topic.
	DestinationName func(topic string) string
}

// Subscriber is a Watermill message.Subscriber over a SourceFactory: each
// Subscribe opens a source and runs a Listener over it.
type Subscriber struct {
	open   SourceFactory
	cfg    SubscriberConfig
	logger watermill.LoggerAdapter

	mu        sync.Mutex
	listeners map[*Listener]Source
	closed    bool
	wg        sync.WaitGroup
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
	_ StatefulSubscriber           = (*Subscriber)(nil)
)

// NewSubscriber validates cfg and returns a subscriber.
func NewSubscriber(open SourceFactory, cfg SubscriberConfig) (*Subscriber, error) {
	var errs []error
	if open == nil {
		errs = append(errs, errors.New("open: a SourceFactory is required"))
	}
	if cfg.NewReceiver == nil {
		errs = append(errs, errors.New("NewReceiver: required (use receiver.New)"))
	}
	if err := cfg.Pipeline.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	logger := cfg.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Subscriber{open: open, cfg: cfg, logger: logger, listeners: map[*Listener]Source{}}, nil
}

// Subscribe implements message.Subscriber. The channel is closed when ctx
// is done or the subscriber is closed, after in-flight messages drained.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.wg.Add(1) // held until the listener is gone
	s.mu.Unlock()

	l, src, err := s.start(ctx, topic)
	if err != nil {
		s.wg.Done()
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.stop(l, src)
		s.wg.Done()
		return nil, ErrClosed
	}
	s.listeners[l] = src
	s.mu.Unlock()

	go func() {
		defer s.wg.Done()
		select {
		case <-ctx.Done():
		case <-l.stopCh:
		}
		s.stop(l, src)
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	return l.Messages(), nil
}

func (s *Subscriber) start(ctx context.Context, topic string) (*Listener, Source, error) {
	src, err := s.open(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	l, err := NewListener(ListenerConfig{
		Name:        s.listenerName(topic),
		Destination: s.destination(topic),
		Source:      src,
		Pipeline:    s.cfg.Pipeline,
		NewReceiver: s.cfg.NewReceiver,
		Context:     ctx,
		Logger:      s.logger,
	})
	if err == nil {
		err = l.Start()
	}
	if err != nil {
		_ = src.Close(context.Background())
		return nil, nil, err
	}
	return l, src, nil
}

// listenerName is the name of topic's listener.
func (s *Subscriber) listenerName(topic string) string {
	switch {
	case s.cfg.Name != nil:
		return s.cfg.Name(topic)
	case s.cfg.ConsumerGroup != "":
		return topic + "/" + s.cfg.ConsumerGroup
	default:
		return topic
	}
}

// destination is what topic's listener consumes.
func (s *Subscriber) destination(topic string) Destination {
	d := Destination{System: s.cfg.System, Name: topic, ConsumerGroup: s.cfg.ConsumerGroup}
	if s.cfg.DestinationName != nil {
		d.Name = s.cfg.DestinationName(topic)
	}
	return d
}

// MessagingSystem returns the transport's messaging.system
// (SubscriberConfig.System), for package telemetry.
func (s *Subscriber) MessagingSystem() string { return s.cfg.System }

// stop closes a listener (draining) and then its source.
func (s *Subscriber) stop(l *Listener, src Source) {
	ctx, cancel := context.WithTimeout(context.Background(), l.pcfg.DrainTimeout)
	defer cancel()
	_ = l.Close(ctx)
	cctx, ccancel := context.WithTimeout(context.Background(), l.pcfg.DrainTimeout)
	defer ccancel()
	if err := src.Close(cctx); err != nil {
		s.logger.Error("closing source", err, watermill.LogFields{"listener": l.Name()})
	}
}

// SubscribeInitialize implements message.SubscribeInitializer.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if s.cfg.Initialize == nil {
		return nil
	}
	return s.cfg.Initialize(topic)
}

// Listeners returns the running listeners.
func (s *Subscriber) Listeners() []*Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := make([]*Listener, 0, len(s.listeners))
	for l := range s.listeners {
		ls = append(ls, l)
	}
	return ls
}

// ListenerStates returns a snapshot of every running listener (for the
// health package).
func (s *Subscriber) ListenerStates() []ListenerState {
	ls := s.Listeners()
	out := make([]ListenerState, len(ls))
	for i, l := range ls {
		out[i] = l.State()
	}
	return out
}

// Close implements message.Subscriber: every listener stops fetching,
// releases what it prefetched, drains in-flight messages (up to
// DrainTimeout), and closes its channel and source. Idempotent; waits.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	ls := make([]*Listener, 0, len(s.listeners))
	for l := range s.listeners {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), l.pcfg.DrainTimeout)
			defer cancel()
			_ = l.Close(ctx)
		}()
	}
	wg.Wait()
	s.wg.Wait()
	return nil
}
