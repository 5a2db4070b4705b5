package transport

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// A Driver opens publishers and subscribers for one URL scheme. Transport
// packages register theirs in init, as database/sql drivers do.
//
// A URL names a destination and how to use it, so one URL serves both
// sides: each method accepts the other side's known parameters (checking
// them, then ignoring them) and rejects, with an error wrapping
// ErrInvalidConfig, a parameter neither side knows, naming it and listing
// the accepted ones.
type Driver interface {
	OpenPublisher(ctx context.Context, u *url.URL, opts Options) (message.Publisher, error)
	OpenSubscriber(ctx context.Context, u *url.URL, opts Options) (StatefulSubscriber, error)
}

// A StatefulSubscriber is a Watermill message.Subscriber whose listeners
// report their state. OpenSubscriber returns one, and every Berth
// subscriber is one (*Subscriber, and each transport's subscriber, which is
// or embeds one), so it goes as it is to health (Handler.AddSource, Check)
// and telemetry (RegisterSubscriber).
type StatefulSubscriber interface {
	message.Subscriber
	StateSource
}

// Options are the settings a URL cannot carry. The zero value is the
// defaults.
type Options struct {
	// Logger receives the transport's logs; nil discards them.
	Logger watermill.LoggerAdapter

	// Observer receives a subscriber's pipeline events, for metrics and
	// traces: every driver sets it as its subscriber's
	// receiver.Config.Observer. telemetry.NewObserver builds one over
	// OpenTelemetry (with the global meter and tracer providers unless
	// its Config names others). Publishers have no pipeline and ignore
	// it; wrap them with telemetry.Publisher. Defaults to nil (none).
	Observer Observer

	// ConsumerGroup is the consumer group a subscriber joins, as the
	// URL's consumer_group parameter would set it: subscribers of one
	// group share each topic's messages, every group gets all of them.
	// Every driver honours it (mem, sqlite, postgres, sqlserver, sqs); a
	// URL whose consumer_group names another group is an error wrapping
	// ErrInvalidConfig. Publishers ignore it. Defaults to "" (the URL's
	// consumer_group, else the topic's default group).
	ConsumerGroup string
}

// ConsumerGroupFor returns the consumer group a subscriber joins given the
// URL's consumer_group parameter (urlGroup, "" when absent): o.ConsumerGroup
// when set, else urlGroup. Both set and different is an error wrapping
// ErrInvalidConfig naming both. Drivers call it after parsing the URL.
func (o Options) ConsumerGroupFor(urlGroup string) (string, error) {
	switch {
	case o.ConsumerGroup == "":
		return urlGroup, nil
	case urlGroup == "" || urlGroup == o.ConsumerGroup:
		return o.ConsumerGroup, nil
	}
	return "", fmt.Errorf("%w: consumer group %q (WithConsumerGroup) conflicts with the URL's consumer_group=%q; set it in one place",
		ErrInvalidConfig, o.ConsumerGroup, urlGroup)
}

// Option sets an Options field.
type Option func(*Options)

// WithLogger sets the logger.
func WithLogger(l watermill.LoggerAdapter) Option { return func(o *Options) { o.Logger = l } }

// WithObserver sets the observer of a subscriber's pipeline (see
// Options.Observer).
func WithObserver(obs Observer) Option { return func(o *Options) { o.Observer = obs } }

// WithConsumerGroup sets the consumer group a subscriber joins (see
// Options.ConsumerGroup), instead of appending consumer_group to the URL.
func WithConsumerGroup(group string) Option { return func(o *Options) { o.ConsumerGroup = group } }

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes a driver available under scheme. It panics if scheme is
// registered twice or d is nil (a programming error in an init function,
// never user input).
func Register(scheme string, d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if d == nil {
		panic("transport: Register driver is nil")
	}
	if _, dup := drivers[scheme]; dup {
		panic("transport: Register called twice for scheme " + scheme)
	}
	drivers[scheme] = d
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	s := make([]string, 0, len(drivers))
	for k := range drivers {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

func lookup(rawURL string) (Driver, *url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included: report
		// only what is wrong with it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, fmt.Errorf("%w: malformed URL: %w", ErrInvalidConfig, err)
	}
	if u.Scheme == "" {
		return nil, nil, fmt.Errorf("%w: URL %q has no scheme; registered: %s", ErrInvalidConfig, u.Redacted(), strings.Join(Schemes(), ", "))
	}
	driversMu.RLock()
	d, ok := drivers[u.Scheme]
	driversMu.RUnlock()
	if !ok {
		return nil, nil, fmt.Errorf("%w %q; registered: %s (import the transport package, or github.com/berth-go/berth/transport/all)",
			ErrUnknownScheme, u.Scheme, strings.Join(Schemes(), ", "))
	}
	return d, u, nil
}

func options(opts []Option) Options {
	var o Options
	for _, f := range opts {
		f(&o)
	}
	if o.Logger == nil {
		o.Logger = watermill.NopLogger{}
	}
	return o
}

// OpenPublisher opens a Watermill publisher for rawURL, whose scheme selects
// the transport (mem://, postgres://, sqlite://, sqlserver://, sqs://). The
// subscriber's parameters are accepted too, so one URL serves both sides;
// an unknown or invalid parameter is an error naming it.
func OpenPublisher(ctx context.Context, rawURL string, opts ...Option) (message.Publisher, error) {
	d, u, err := lookup(rawURL)
	if err != nil {
		return nil, err
	}
	return d.OpenPublisher(ctx, u, options(opts))
}

// OpenSubscriber opens a Watermill subscriber for rawURL, whose scheme
// selects the transport. Query parameters map to config fields; the
// publisher's are accepted too (one URL serves both sides); an unknown or
// invalid one is an error naming it. The subscriber reports its listeners'
// states: pass it to health.Handler.AddSource or
// telemetry.RegisterSubscriber as it is.
func OpenSubscriber(ctx context.Context, rawURL string, opts ...Option) (StatefulSubscriber, error) {
	d, u, err := lookup(rawURL)
	if err != nil {
		return nil, err
	}
	return d.OpenSubscriber(ctx, u, options(opts))
}
