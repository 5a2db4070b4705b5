package receiver

import (
	"errors"
	"fmt"
	"time"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/wave"
)

// Defaults of Config, for fields left zero.
const (
	DefaultConcurrency   = 16
	DefaultMaxAttempts   = 10
	DefaultRetryDelay    = 100 * time.Millisecond
	DefaultMaxRetryDelay = 30 * time.Second
	DefaultDrainTimeout  = 10 * time.Second
	DefaultCheckInterval = 250 * time.Millisecond
	DefaultErrorBackoff  = 100 * time.Millisecond
	DefaultMaxErrorDelay = 30 * time.Second
	DefaultCloseGrace    = 5 * time.Second
	// DefaultContactInterval is how long a listener goes without hearing
	// from its broker before it pings it. With health's default
	// Unreachable (10s), a broker that stops answering is reported within
	// 10s (docs/operations.md, "How fast health sees an outage"): the
	// ping goes out by 9s, counts as unanswered a second later. Below the
	// SQL idle probe's 10s, so an idle pool pings between two probes, once
	// per probe, and the two never race.
	DefaultContactInterval = 8 * time.Second
)

// Config configures the receive pipeline of every transport's subscriber:
// the receive loop (waves, back-pressure, watchdog) and the stage (buffer,
// permits, retries). Each transport's SubscriberConfig holds one as its
// Pipeline. The zero value is the defaults.
type Config struct {
	// Concurrency is the maximum number of un-acked messages delivered to
	// Watermill at once (the concurrency permits). Set 1 for strict order
	// (on a source that delivers in order: the SQL queues, mem): a nack
	// then retries the message in place (see RetryInPlace).
	// A message's settlement (the call its Ack or Nack makes) runs on one
	// of Concurrency settle slots when one is free, and its permit goes to
	// the next message at once; with every slot taken it runs on its
	// permit.
	// Defaults to DefaultConcurrency (16). URL: concurrency.
	Concurrency int

	// BufferSize bounds the claimed deliveries waiting for a permit.
	// Defaults to 2 × Concurrency. URL: buffer.
	BufferSize int

	// MaxAttempts: a message nacked on its MaxAttempts-th attempt is
	// dead-lettered instead of retried. Negative means retry forever (leave
	// it to the broker's own redrive policy). Defaults to
	// DefaultMaxAttempts (10). URL: max_attempts.
	MaxAttempts int

	// OrderedNack decides what a nack does to a message with an ordering
	// key (transport.MetadataOrderingKey, or the SQS FIFO message group):
	// OrderedNackBlock retries it in place, blocking its key's later
	// messages until it is settled, and dead-letters it only after
	// MaxAttempts; OrderedNackDeadLetter dead-letters it at once, so its
	// key moves on. Messages without a key are retried either way. See
	// docs/ordering.md. Defaults to OrderedNackBlock. URL: ordered_nack
	// (block or dead_letter).
	OrderedNack OrderedNack

	// RetryInPlace decides where a nacked message that is not
	// dead-lettered waits for its retry. RetryInPlaceAuto: with
	// Concurrency 1 the listener keeps it (and its lease, renewed), waits
	// RetryDelayFor(attempt), and hands the same message to the handler
	// again with the attempt counted, dispatching nothing behind it
	// meanwhile, so that one failure does not let later messages overtake
	// it; with Concurrency > 1 it goes back to the broker. RetryInPlaceOff:
	// always back to the broker, due after the delay (later messages may
	// pass it). In-place attempts are counted by the listener: the broker's
	// attempt count (a SQL attempts column, SQS ApproximateReceiveCount)
	// does not grow with them. Defaults to RetryInPlaceAuto. URL:
	// retry_in_place (auto or off).
	RetryInPlace RetryInPlace

	// RetryDelay is the redelivery delay after the first nack; it doubles
	// per attempt up to MaxRetryDelay. Negative means redeliver at once.
	// Defaults to DefaultRetryDelay (100ms) and DefaultMaxRetryDelay (30s).
	// URL: retry_delay, max_retry_delay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration

	// DrainTimeout is how long a subscriber's Close waits for in-flight
	// messages to be acked or nacked before handing them back for
	// redelivery (Listener.Close takes a context instead). Defaults to
	// DefaultDrainTimeout (10s). URL: drain_timeout.
	DrainTimeout time.Duration

	// CloseGrace bounds how long closing runs past its deadline (the
	// context of Listener.Close, DrainTimeout for a subscriber's Close):
	// the messages still in flight are handed back for redelivery within
	// it, then Close returns an error wrapping the deadline's, whatever a
	// broker or a consumer that stopped reading the channel still does.
	// It is also the deadline of closing the source. Defaults to
	// DefaultCloseGrace (5s). URL: close_grace.
	CloseGrace time.Duration

	// WaveCap is the largest receive wave (package wave: one probe after
	// idle, double on a full wave, partial sets the next, empty resets).
	// On a source that claims straight into processing
	// (transport.DirectClaimer: the SQL queues), a wave at the cap whose
	// every row has a free permit grows by the permits still free, up to
	// twice WaveCap; rows beyond the cap never wait in the buffer.
	// Defaults to wave.DefaultCap (64). URL: wave_cap.
	WaveCap int
	// EmptyDelay is the wait after a fully empty wave. Negative means no
	// wait (long-polling sources, whose empty receive already waited).
	// Defaults to wave.DefaultEmptyDelay (1s). URL: empty_delay.
	EmptyDelay time.Duration
	// IdleAfter: a gap this long since the last wave counts as idle, and the
	// next wave is one probe. Defaults to wave.DefaultIdleAfter (5s).
	IdleAfter time.Duration

	// MaxQueue is the back-pressure maximum on QueueCount (buffered + in
	// flight + batch pending): above it the loop stops fetching and the
	// listener reports too busy. Defaults to 1000. URL: max_queue.
	MaxQueue int

	// RestartQueue is the threshold at or below which a too-busy listener
	// resumes. Defaults to MaxQueue × 7 / 10. URL: restart_queue.
	RestartQueue int

	// CheckInterval is the period of the back-pressure and watchdog check
	// (it also reacts at once to count changes). Defaults to
	// DefaultCheckInterval (250ms). URL: check_interval.
	CheckInterval time.Duration

	// ErrorBackoff is the first wait after a failed receive; it doubles
	// (with jitter) per consecutive failure up to MaxErrorDelay. Defaults to
	// DefaultErrorBackoff (100ms) and DefaultMaxErrorDelay (30s).
	ErrorBackoff  time.Duration
	MaxErrorDelay time.Duration

	// ContactInterval: a listener that has not heard from its broker for
	// this long (no Claim reached it: an idle SQL queue claims without a
	// round trip) pings a transport.Pinger source, each ping bounded by
	// ContactInterval too. It is what lets health report a blackholed or
	// frozen broker within health.Config.Unreachable whatever the load;
	// keep it at least 2s below that (a ping counts as unanswered a second
	// after it went out, and the check runs once a second). An idle SQL
	// pool pays one ping per idle probe (IdleProbeMax, 10s) at most,
	// shared by its queues (PostgreSQL: an empty statement). Negative
	// disables the pings. Defaults to DefaultContactInterval (8s). URL:
	// contact_interval.
	ContactInterval time.Duration

	// Clock drives the waits of the receive loop, the watchdog and lease
	// renewal; nil is transport.WallClock. For tests.
	Clock transport.Clock

	// Observer receives pipeline events for metrics and traces; nil means
	// none (NopObserver).
	Observer transport.Observer
}

// OrderedNack is what a nack does to a message with an ordering key (see
// Config.OrderedNack).
type OrderedNack string

// The values of Config.OrderedNack.
const (
	// OrderedNackBlock retries a nacked keyed message in place, with its
	// backoff; its key's later messages wait until it is acknowledged or,
	// after MaxAttempts, dead-lettered. The default.
	OrderedNackBlock OrderedNack = "block"
	// OrderedNackDeadLetter dead-letters a nacked keyed message at once, so
	// that its key's next message is handled without waiting for retries.
	OrderedNackDeadLetter OrderedNack = "dead_letter"
)

// RetryInPlace is where a nacked message waits for its retry (see
// Config.RetryInPlace).
type RetryInPlace string

// The values of Config.RetryInPlace.
const (
	// RetryInPlaceAuto retries in place when Concurrency is 1, through the
	// broker otherwise. The default.
	RetryInPlaceAuto RetryInPlace = "auto"
	// RetryInPlaceOff always retries through the broker.
	RetryInPlaceOff RetryInPlace = "off"
)

// inPlace reports whether a nack retries in place (c has its defaults).
func (c Config) inPlace() bool {
	return c.Concurrency == 1 && c.RetryInPlace == RetryInPlaceAuto
}

// DefaultMaxQueue is the default back-pressure maximum.
const DefaultMaxQueue = 1000

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.BufferSize == 0 {
		c.BufferSize = 2 * c.Concurrency
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = DefaultRetryDelay
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if c.OrderedNack == "" {
		c.OrderedNack = OrderedNackBlock
	}
	if c.RetryInPlace == "" {
		c.RetryInPlace = RetryInPlaceAuto
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.CloseGrace == 0 {
		c.CloseGrace = DefaultCloseGrace
	}
	w := c.wave().WithDefaults()
	c.WaveCap, c.EmptyDelay, c.IdleAfter = w.Cap, w.EmptyDelay, w.IdleAfter
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.RestartQueue == 0 {
		c.RestartQueue = c.MaxQueue * 7 / 10
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.ErrorBackoff == 0 {
		c.ErrorBackoff = DefaultErrorBackoff
	}
	if c.MaxErrorDelay == 0 {
		c.MaxErrorDelay = DefaultMaxErrorDelay
	}
	if c.ContactInterval == 0 {
		c.ContactInterval = DefaultContactInterval
	}
	if c.Clock == nil {
		c.Clock = transport.WallClock
	}
	if c.Observer == nil {
		c.Observer = transport.NopObserver{}
	}
	return c
}

// Validate reports every invalid field of c (after defaults) at once,
// wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	d := c.WithDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if d.Concurrency < 1 {
		bad("Concurrency", "must be ≥ 1, got %d", c.Concurrency)
	}
	if d.BufferSize < 1 {
		bad("BufferSize", "must be ≥ 1, got %d", c.BufferSize)
	}
	if d.DrainTimeout < 0 {
		bad("DrainTimeout", "must be ≥ 0, got %s", c.DrainTimeout)
	}
	if d.CloseGrace < 0 {
		bad("CloseGrace", "must be ≥ 0, got %s", c.CloseGrace)
	}
	if d.MaxRetryDelay < 0 {
		bad("MaxRetryDelay", "must be ≥ 0, got %s", c.MaxRetryDelay)
	}
	if d.OrderedNack != OrderedNackBlock && d.OrderedNack != OrderedNackDeadLetter {
		bad("OrderedNack", "must be %q or %q, got %q", OrderedNackBlock, OrderedNackDeadLetter, c.OrderedNack)
	}
	if d.RetryInPlace != RetryInPlaceAuto && d.RetryInPlace != RetryInPlaceOff {
		bad("RetryInPlace", "must be %q or %q, got %q", RetryInPlaceAuto, RetryInPlaceOff, c.RetryInPlace)
	}
	if c.WaveCap < 0 {
		bad("WaveCap", "must be ≥ 1, got %d", c.WaveCap)
	}
	if c.IdleAfter < 0 {
		bad("IdleAfter", "must be ≥ 0, got %s", c.IdleAfter)
	}
	if d.MaxQueue < 1 {
		bad("MaxQueue", "must be ≥ 1, got %d", c.MaxQueue)
	}
	if d.RestartQueue < 0 || d.RestartQueue >= d.MaxQueue {
		bad("RestartQueue", "must be ≥ 0 and below MaxQueue (%d), got %d", d.MaxQueue, d.RestartQueue)
	}
	if d.CheckInterval < 0 {
		bad("CheckInterval", "must be > 0, got %s", c.CheckInterval)
	}
	if d.ErrorBackoff < 0 || d.MaxErrorDelay < 0 {
		bad("ErrorBackoff", "ErrorBackoff and MaxErrorDelay must be ≥ 0")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// RetryDelayFor returns the redelivery delay after a nack of the given
// 1-based attempt: RetryDelay × 2^(attempt-1), capped at MaxRetryDelay.
func (c Config) RetryDelayFor(attempt int) time.Duration {
	c = c.WithDefaults()
	if c.RetryDelay < 0 {
		return 0
	}
	d := c.RetryDelay
	for i := 1; i < attempt && d < c.MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, c.MaxRetryDelay)
}

// wave is the receive ramp's configuration.
func (c Config) wave() wave.Config {
	return wave.Config{Cap: c.WaveCap, EmptyDelay: c.EmptyDelay, IdleAfter: c.IdleAfter}
}
