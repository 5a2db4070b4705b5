package batching

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// Defaults of Config, for fields left zero.
const (
	// DefaultMaxSize is the default number of members at which a batch is
	// handed to the handler.
	DefaultMaxSize = 100
	// DefaultMaxWait is the default longest time a batch stays open after
	// its first member arrived.
	DefaultMaxWait = time.Second
	// DefaultConcurrency is the default number of batches handled at once.
	DefaultConcurrency = 1
	// DefaultFlushTimeout is the default bound of Consume's final flush.
	DefaultFlushTimeout = 10 * time.Second
)

// Config configures a Handler, a Subscriber or Consume. The zero value is
// the defaults.
type Config struct {
	// MaxSize is the number of members at which a batch is closed and
	// handed to the handler at once. Defaults to DefaultMaxSize (100).
	MaxSize int

	// MaxWait is the longest a batch stays open after its first member
	// arrived; then it is handed to the handler however small it is.
	// Defaults to DefaultMaxWait (1s).
	MaxWait time.Duration

	// Key, when set, groups members: each key has its own open batch, so a
	// batch only ever holds members with the same key (a tenant, an
	// aggregate, a destination table). Defaults to nil: one open batch.
	Key func(msg *message.Message) string

	// Concurrency is the number of batches handled at once. A batch that is
	// closed while all slots are busy waits for one (no new members join
	// it); its members stay counted as batch pending, so back-pressure
	// sees them. Defaults to DefaultConcurrency (1).
	Concurrency int

	// NackOnClose makes Close nack the members of open batches instead of
	// handing those batches to the handler. Either way no member is handled
	// twice. Defaults to false: Close flushes open batches.
	NackOnClose bool

	// FlushTimeout bounds the final flush of Consume after its context is
	// done, and of a Subscriber's subscription after it is closed: the last
	// batches run with a context that is not cancelled until FlushTimeout
	// has passed. Handler.Close is bounded by its own context instead.
	// Defaults to DefaultFlushTimeout (10s).
	FlushTimeout time.Duration

	// Logger receives handler panics and, in Consume, batch failures (a
	// router logs a Subscriber's).
	// Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter

	// Clock drives MaxWait; nil is the wall clock. For tests.
	Clock transport.Clock
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxSize == 0 {
		c.MaxSize = DefaultMaxSize
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = DefaultFlushTimeout
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	if c.Clock == nil {
		c.Clock = wallClock{}
	}
	return c
}

// Validate reports every invalid field of c at once, wrapped in
// transport.ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	if c.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("MaxSize: must be ≥ 1 (0 for the default), got %d", c.MaxSize))
	}
	if c.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("MaxWait: must be > 0 (0 for the default), got %s", c.MaxWait))
	}
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("Concurrency: must be ≥ 1 (0 for the default), got %d", c.Concurrency))
	}
	if c.FlushTimeout < 0 {
		errs = append(errs, fmt.Errorf("FlushTimeout: must be > 0 (0 for the default), got %s", c.FlushTimeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
