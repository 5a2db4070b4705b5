// Package wave decides how many receives a listener launches next.
//
// The receive loop never asks the broker how much is waiting (no peek, no
// backlog estimate). It probes with real receives and adapts to what they
// find:
//
//   - after idle, or after an empty wave, the next wave is one probe;
//   - while every probe of a wave finds a message, the next wave doubles;
//   - a partial wave (some probes found a message, some did not) sets the
//     next wave to the number that did: the observed availability, with no
//     backoff;
//   - a fully empty wave resets to one probe and waits the empty delay;
//   - a wave never exceeds the cap, nor the free buffer space.
//
// What a probe is depends on the transport: one SQL claim of n rows counts as
// n probes (rows returned = probes that found a message); an SQS wave of k
// concurrent ReceiveMessage calls counts each call as a probe that found a
// message when it came back full.
//
// A Controller is pure logic with an injected clock; it is not safe for
// concurrent use (one receive loop owns it).
package wave

import (
	"errors"
	"fmt"
	"time"

	"github.com/berth-go/berth/transport"
)

// Defaults for Config fields left zero.
const (
	DefaultCap        = 64
	DefaultEmptyDelay = time.Second
	// DefaultIdleAfter is how long a loop must have launched nothing (while
	// paused, latched or backing off) before its next wave starts again at
	// one probe.
	DefaultIdleAfter = 5 * time.Second
)

// Config configures a Controller. The zero value is the defaults.
type Config struct {
	// Cap is the largest wave. Defaults to DefaultCap (64).
	Cap int
	// EmptyDelay is the wait after a fully empty wave. Defaults to
	// DefaultEmptyDelay (1s). Negative means no wait (for long-polling
	// sources whose empty receive already waited).
	EmptyDelay time.Duration
	// IdleAfter: a gap this long since the last wave counts as idle, and the
	// next wave is one probe. Defaults to DefaultIdleAfter (5s).
	IdleAfter time.Duration
}

// ErrInvalidConfig is wrapped by Validate's errors.
var ErrInvalidConfig = errors.New("wave: invalid config")

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Cap == 0 {
		c.Cap = DefaultCap
	}
	if c.EmptyDelay == 0 {
		c.EmptyDelay = DefaultEmptyDelay
	}
	if c.IdleAfter == 0 {
		c.IdleAfter = DefaultIdleAfter
	}
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Cap < 0 {
		errs = append(errs, fmt.Errorf("Cap: must be ≥ 1, got %d", c.Cap))
	}
	if c.IdleAfter < 0 {
		errs = append(errs, fmt.Errorf("IdleAfter: must be ≥ 0, got %s", c.IdleAfter))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// Controller holds the ramp state of one receive loop.
type Controller struct {
	cfg     Config
	clock   transport.Clock
	next    int
	last    time.Time // when the last wave was observed
	started bool
}

// New returns a controller; nil clock means the wall clock.
func New(cfg Config, clock transport.Clock) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = transport.WallClock
	}
	return &Controller{cfg: cfg.WithDefaults(), clock: clock, next: 1}, nil
}

// Next returns the size of the next wave given the free buffer space: at
// least 1 when free ≥ 1, and 0 when free ≤ 0 (launch nothing).
func (c *Controller) Next(free int) int {
	if free <= 0 {
		return 0
	}
	if c.started && c.clock.Now().Sub(c.last) >= c.cfg.IdleAfter {
		c.next = 1
	}
	return min(c.next, c.cfg.Cap, free)
}

// Observe records the outcome of a wave of launched probes of which found
// found a message, and returns how long to wait before the next wave.
func (c *Controller) Observe(launched, found int) time.Duration {
	c.started = true
	c.last = c.clock.Now()
	switch {
	case launched <= 0:
		return 0
	case found <= 0:
		c.next = 1
		return max(c.cfg.EmptyDelay, 0) // negative: no wait
	case found >= launched:
		c.next = min(launched*2, c.cfg.Cap)
	default:
		c.next = found
	}
	return 0
}

// Hint raises the next wave to n (capped) when a wake-up announced n
// messages: there is no point probing for one when n are known to have
// arrived.
func (c *Controller) Hint(n int) {
	if n > c.next {
		c.next = min(n, c.cfg.Cap)
	}
	c.last = c.clock.Now() // a wake-up is not idleness
}

// Peek returns the unbounded size of the next wave (for metrics).
func (c *Controller) Peek() int { return c.next }

// Reset makes the next wave a single probe.
func (c *Controller) Reset() { c.next = 1 }
