package health

import (
	"errors"
	"fmt"
	"time"

	"github.com/berth-go/berth/transport"
)

// Defaults of Config, for fields left zero.
const (
	DefaultStartupGrace           = time.Minute
	DefaultFaultGrace             = time.Minute
	DefaultMaxConsecutiveFailures = 5
	DefaultStaleReceive           = 5 * time.Minute
	DefaultUnreachable            = 10 * time.Second
	DefaultPingTimeout            = 2 * time.Second
)

// Config configures the status-to-health mapping and the pings. The zero
// value is the defaults.
type Config struct {
	// StartupGrace is how long after a listener started (or, for one not
	// started yet, after the Handler was created) a listener that has not
	// received yet is reported starting (degraded, not ready) rather than
	// unhealthy. Negative means no grace. Defaults to DefaultStartupGrace
	// (1m).
	StartupGrace time.Duration

	// FaultGrace is how long a faulted listener may stay faulted before
	// liveness fails, so that an orchestrator restarts a process that
	// cannot heal itself. The watchdog normally rebuilds a faulted receiver
	// within one receiver.Config.CheckInterval. Readiness fails at once.
	// Negative means liveness never fails. Defaults to DefaultFaultGrace
	// (1m).
	FaultGrace time.Duration

	// MaxConsecutiveFailures is the number of consecutive receive failures
	// at which an accepting listener is reported receive_failing (degraded,
	// not ready); below it, receive_errors (degraded, ready). Negative means
	// failures never make a listener unready. Defaults to
	// DefaultMaxConsecutiveFailures (5).
	MaxConsecutiveFailures int

	// StaleReceive: an accepting listener whose last successful receive
	// (even an empty one) is older than this is reported receive_stalled
	// (unhealthy, not ready): its loop is stuck. Keep it well above the
	// longest receive wait (SQS long polling waits up to 20s). Negative
	// disables the check. Defaults to DefaultStaleReceive (5m).
	StaleReceive time.Duration

	// Unreachable: an accepting or too-busy listener whose broker has not
	// answered for this long while its calls fail or go unanswered
	// (transport.ListenerState.LastContact, ContactFailing) is reported
	// broker_unreachable (unhealthy, not ready), whatever the failure: a
	// refused or reset connection, a blackhole, a frozen broker. A single
	// slow statement does not count while anything else the listener sends
	// is answered (it pings every receiver.Config.ContactInterval, 8s, when
	// nothing else reached the broker). Keep it at least 2s above
	// ContactInterval. Negative disables the check. Defaults to
	// DefaultUnreachable (10s).
	Unreachable time.Duration

	// PingTimeout bounds each Pinger call. Defaults to DefaultPingTimeout
	// (2s).
	PingTimeout time.Duration

	// Clock is the time source; nil is transport.WallClock. For tests.
	Clock transport.Clock
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.StartupGrace == 0 {
		c.StartupGrace = DefaultStartupGrace
	}
	if c.FaultGrace == 0 {
		c.FaultGrace = DefaultFaultGrace
	}
	if c.MaxConsecutiveFailures == 0 {
		c.MaxConsecutiveFailures = DefaultMaxConsecutiveFailures
	}
	if c.StaleReceive == 0 {
		c.StaleReceive = DefaultStaleReceive
	}
	if c.Unreachable == 0 {
		c.Unreachable = DefaultUnreachable
	}
	if c.PingTimeout == 0 {
		c.PingTimeout = DefaultPingTimeout
	}
	if c.Clock == nil {
		c.Clock = transport.WallClock
	}
	return c
}

// Validate reports every invalid field of c at once, wrapped in
// transport.ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	if c.PingTimeout < 0 {
		errs = append(errs, fmt.Errorf("PingTimeout: must be ≥ 0, got %s", c.PingTimeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("health: %w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}
