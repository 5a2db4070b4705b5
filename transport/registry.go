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
type Driver interface {
	OpenPublisher(ctx context.Context, u *url.URL, opts Options) (message.Publisher, error)
	OpenSubscriber(ctx context.Context, u *url.URL, opts Options) (message.Subscriber, error)
}

// Options are the settings a URL cannot carry.
type Options struct {
	// Logger receives the transport's logs; nil discards them.
	Logger watermill.LoggerAdapter
}

// Option sets an Options field.
type Option func(*Options)

// WithLogger sets the logger.
func WithLogger(l watermill.LoggerAdapter) Option { return func(o *Options) { o.Logger = l } }

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
// the transport (mem://, postgres://, sqlite://, sqlserver://, sqs://).
func OpenPublisher(ctx context.Context, rawURL string, opts ...Option) (message.Publisher, error) {
	d, u, err := lookup(rawURL)
	if err != nil {
		return nil, err
	}
	return d.OpenPublisher(ctx, u, options(opts))
}

// OpenSubscriber opens a Watermill subscriber for rawURL, whose scheme
// selects the transport. Query parameters map to config fields; an unknown or
// invalid one is an error naming it.
func OpenSubscriber(ctx context.Context, rawURL string, opts ...Option) (message.Subscriber, error) {
	d, u, err := lookup(rawURL)
	if err != nil {
		return nil, err
	}
	return d.OpenSubscriber(ctx, u, options(opts))
}
