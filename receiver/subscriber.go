package receiver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/guard"
	"github.com/berth-go/berth/internal/subopt"
	"github.com/berth-go/berth/transport"
)

// SourceFactory opens the source for one Subscribe(ctx, topic) call.
type SourceFactory func(ctx context.Context, topic string) (transport.Source, error)

// SubscriberConfig configures the Subscriber every transport builds on.
type SubscriberConfig struct {
	// Pipeline configures each listener's receive pipeline.
	Pipeline Config
	// Logger; nil discards.
	Logger watermill.LoggerAdapter
	// Initialize, when set, is what SubscribeInitialize does (create the
	// queue or table ahead of the first Subscribe).
	Initialize func(topic string) error
	// Name, when set, names listeners as Name(topic). Defaults to the
	// topic, or "topic/ConsumerGroup" with a consumer group.
	Name func(topic string) string
	// System is the transport's messaging.system (see
	// transport.Destination.System), reported by MessagingSystem and each
	// listener's Destination. Defaults to "" (unknown).
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
// Subscribe opens a source and runs a Listener over it. Every transport's
// subscriber is one, built with one NewSubscriber call.
type Subscriber struct {
	open   SourceFactory
	cfg    SubscriberConfig
	pcfg   Config // cfg.Pipeline with defaults
	logger watermill.LoggerAdapter

	mu        sync.Mutex
	listeners map[*Listener]transport.Source
	closed    bool
	closeErr  error          // what Shutdown calls reported so far
	wg        sync.WaitGroup // one per Subscribe whose listener is running
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
	_ transport.StatefulSubscriber = (*Subscriber)(nil)
)

// NewSubscriber validates cfg and returns a subscriber.
func NewSubscriber(open SourceFactory, cfg SubscriberConfig) (*Subscriber, error) {
	var errs []error
	if open == nil {
		errs = append(errs, errors.New("open: a SourceFactory is required"))
	}
	if err := cfg.Pipeline.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	logger := cfg.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Subscriber{open: open, cfg: cfg, pcfg: cfg.Pipeline.WithDefaults(), logger: logger,
		listeners: map[*Listener]transport.Source{}}, nil
}

// Subscribe implements message.Subscriber. The channel is closed when ctx
// is done or the subscriber is closed, after in-flight messages drained.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, transport.ErrClosed
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
		return nil, transport.ErrClosed
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

func (s *Subscriber) start(ctx context.Context, topic string) (*Listener, transport.Source, error) {
	src, err := s.open(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	if wrap := subopt.From(ctx).WrapSource; wrap != nil {
		src = wrap(src)
	}
	l, err := NewListener(ListenerConfig{
		Name:        s.listenerName(topic),
		Destination: s.destination(topic),
		Source:      src,
		Pipeline:    s.cfg.Pipeline,
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
func (s *Subscriber) destination(topic string) transport.Destination {
	d := transport.Destination{System: s.cfg.System, Name: topic, ConsumerGroup: s.cfg.ConsumerGroup}
	if s.cfg.DestinationName != nil {
		d.Name = s.cfg.DestinationName(topic)
	}
	return d
}

// MessagingSystem returns the transport's messaging.system
// (SubscriberConfig.System), for package telemetry.
func (s *Subscriber) MessagingSystem() string { return s.cfg.System }

// stop closes a listener, draining for up to DrainTimeout (and its
// CloseGrace past that), then its source within CloseGrace.
func (s *Subscriber) stop(l *Listener, src transport.Source) {
	_ = s.closeListener(l)
	ctx, cancel := context.WithTimeout(context.Background(), s.pcfg.CloseGrace)
	defer cancel()
	if err := src.Close(ctx); err != nil {
		guard.Do(func() { s.logger.Error("closing source", err, watermill.LogFields{"listener": l.Name()}) })
	}
}

// closeListener closes l, draining for up to DrainTimeout.
func (s *Subscriber) closeListener(l *Listener) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.pcfg.DrainTimeout)
	defer cancel()
	return l.Close(ctx)
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

// ListenerStates implements transport.StateSource.
func (s *Subscriber) ListenerStates() []transport.ListenerState {
	ls := s.Listeners()
	out := make([]transport.ListenerState, len(ls))
	for i, l := range ls {
		out[i] = l.State()
	}
	return out
}

// Shutdown closes the subscriber like http.Server.Shutdown: every listener
// stops fetching, releases what it prefetched, and drains in-flight
// messages until ctx is done; what is left is handed back for redelivery
// within CloseGrace, and each listener's channel and source are closed.
// It returns an error wrapping ctx.Err() when a listener handed messages
// back unsettled, and returns at most CloseGrace past ctx (2 × CloseGrace
// when a source is slow to close) even when a consumer stopped reading a
// channel. Later calls wait for the listeners the first call closed and
// return what the earlier calls reported too.
func (s *Subscriber) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	ls := make([]*Listener, 0, len(s.listeners))
	for l := range s.listeners {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	errs := make(chan error, len(ls))
	for _, l := range ls {
		go func() { errs <- l.Close(ctx) }()
	}
	var all []error
	for range ls {
		all = append(all, <-errs)
	}
	s.wg.Wait() // each listener's goroutine closes its source
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeErr = errors.Join(append([]error{s.closeErr}, all...)...)
	return s.closeErr
}

// Close implements message.Subscriber: Shutdown with a context that ends
// after DrainTimeout. It returns within DrainTimeout + CloseGrace (15s with
// the defaults; 2 × CloseGrace past DrainTimeout when a source is slow to
// close), whatever a consumer that stopped reading does. Messages still
// unsettled at DrainTimeout are handed back for redelivery and logged, not
// returned: Watermill's contract expects nil from Close then (its universal
// suite's TestMessageCtx closes with a message un-acked). Call Shutdown to
// get the error, wrapping context.DeadlineExceeded, as
// http.Server.Shutdown does. Idempotent.
func (s *Subscriber) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.pcfg.DrainTimeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		guard.Do(func() {
			s.logger.Info("closed; in-flight messages handed back for redelivery", watermill.LogFields{"error": err.Error()})
		})
	}
	return nil
}
