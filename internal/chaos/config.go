package chaos

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/transporttest"
)

// Kind names a kind of injected fault.
type Kind string

// The fault kinds. Handler errors and panics are not scheduled faults: they
// happen at Config.HandlerErrorRate and Config.HandlerPanicRate all along.
const (
	KindPGTerminate  Kind = "pg_terminate_backend" // PostgreSQL: terminate the harness's backends
	KindNetLatency   Kind = "net_latency"          // proxy: delay every chunk or request
	KindNetReset     Kind = "net_reset"            // proxy: reset every open connection
	KindNetBlackhole Kind = "net_blackhole"        // proxy: hold traffic, then reset
	KindHTTP5xx      Kind = "http_5xx"             // SQS proxy: 503 ServiceUnavailable
	KindHTTPThrottle Kind = "http_throttle"        // SQS proxy: 400 ThrottlingException
	KindHTTPTimeout  Kind = "http_timeout"         // SQS proxy: hold requests, then 504
	KindKill         Kind = "instance_kill"        // a subscriber abandoned without Close, then restarted
	KindBerthPrefix  Kind = "berth:"               // + a transporttest.Point: Berth's own injection points
)

// Defaults of Config, for fields left zero.
const (
	DefaultMessages         = 2000
	DefaultDuration         = 20 * time.Second
	DefaultInstances        = 3
	DefaultPoisonEvery      = 500
	DefaultFaultInterval    = 1500 * time.Millisecond
	DefaultFaultLength      = 1500 * time.Millisecond
	DefaultHandlerErrorRate = 0.01
	DefaultHandlerPanicRate = 0.005
	DefaultLease            = 3 * time.Second
	DefaultDrainWait        = 2 * time.Minute
	DefaultMaxAttempts      = 8
)

// Config configures one harness run on one transport. The zero value is the
// defaults, except Transport and URL.
type Config struct {
	// Transport is "postgres", "sqlite" or "sqs". Required.
	Transport string
	// URL locates the broker: a PostgreSQL URL, a directory for the SQLite
	// database file, or the SQS endpoint. Required.
	URL string
	// Messages is the number of uniquely identified messages published.
	// Defaults to DefaultMessages (2000).
	Messages int
	// Duration is how long faults are injected; publishing is spread over
	// its first 80%. Defaults to DefaultDuration (20s).
	Duration time.Duration
	// Instances is the number of subscriber instances consuming at once;
	// even ones use a single-message handler, odd ones a batch handler.
	// Defaults to DefaultInstances (3).
	Instances int
	// PoisonEvery makes every PoisonEvery-th message poison: always nacked,
	// so it must be dead-lettered. Negative: none. Defaults to
	// DefaultPoisonEvery (500).
	PoisonEvery int
	// FaultInterval is the mean pause between one fault's recovery and the
	// next fault. Defaults to DefaultFaultInterval (1.5s).
	FaultInterval time.Duration
	// FaultLength is how long a lasting fault (latency, blackhole, 5xx
	// period, a killed instance before its restart) lasts. Defaults to
	// DefaultFaultLength (1.5s).
	FaultLength time.Duration
	// Kinds restricts the scheduled faults. Defaults to every kind the
	// transport supports plus every Berth injection point.
	Kinds []Kind
	// HandlerErrorRate and HandlerPanicRate are the shares of handlings
	// that fail with an error or a panic (on attempts 1 and 2 only, so that
	// only poison messages run out of attempts). Negative: none. Default
	// to DefaultHandlerErrorRate (1%) and DefaultHandlerPanicRate (0.5%).
	HandlerErrorRate float64
	HandlerPanicRate float64
	// Lease is the SQL lease and the SQS visibility timeout: how soon a
	// killed instance's messages return. Defaults to DefaultLease (3s).
	Lease time.Duration
	// MaxAttempts is the pipeline's MaxAttempts. Defaults to
	// DefaultMaxAttempts (8).
	MaxAttempts int
	// DrainWait bounds the wait, after the fault phase, for every message
	// to be handled or dead-lettered. Defaults to DefaultDrainWait (2m).
	DrainWait time.Duration
	// Effects makes the handlers' effects exactly-once and checks it: each
	// successful handling adds 1 to its message's counter in a table, in
	// the handler's transaction (transport.TxFromContext) on postgres and
	// sqlite, in the inbox's (inbox.Middleware, a SQLite file) on sqs; the
	// write comes before the injected handler failures, which roll it
	// back. The Report's Effects must then show every counter at 1.
	Effects bool
	// Seed seeds the fault schedule and rates. Defaults to a random seed.
	Seed uint64
	// Keep leaves the run's schema or queues in place for inspection.
	Keep bool
	// Progress, when set, receives a line per fault and a periodic status.
	Progress io.Writer

	rng *lockedRand
}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (c *Config) withDefaults() {
	if c.Messages == 0 {
		c.Messages = DefaultMessages
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Instances == 0 {
		c.Instances = DefaultInstances
	}
	if c.PoisonEvery == 0 {
		c.PoisonEvery = DefaultPoisonEvery
	}
	if c.FaultInterval == 0 {
		c.FaultInterval = DefaultFaultInterval
	}
	if c.FaultLength == 0 {
		c.FaultLength = DefaultFaultLength
	}
	if c.HandlerErrorRate == 0 {
		c.HandlerErrorRate = DefaultHandlerErrorRate
	}
	if c.HandlerPanicRate == 0 {
		c.HandlerPanicRate = DefaultHandlerPanicRate
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.DrainWait == 0 {
		c.DrainWait = DefaultDrainWait
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	c.rng = &lockedRand{r: rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))}
}

// Validate reports every invalid field at once, wrapped in
// transport.ErrInvalidConfig.
func (c *Config) Validate() error {
	var errs []error
	switch c.Transport {
	case "postgres", "sqlite", "sqs":
	default:
		errs = append(errs, fmt.Errorf("Transport: must be postgres, sqlite or sqs, got %q", c.Transport))
	}
	if c.URL == "" {
		errs = append(errs, errors.New("URL: required"))
	}
	if c.Messages < 0 {
		errs = append(errs, fmt.Errorf("Messages: must be ≥ 1, got %d", c.Messages))
	}
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("Duration: must be > 0, got %s", c.Duration))
	}
	if c.Instances < 0 || c.Instances > 32 {
		errs = append(errs, fmt.Errorf("Instances: must be from 1 to 32, got %d", c.Instances))
	}
	if c.HandlerErrorRate > 0.5 || c.HandlerPanicRate > 0.5 {
		errs = append(errs, errors.New("HandlerErrorRate, HandlerPanicRate: must be at most 0.5"))
	}
	if c.MaxAttempts != 0 && c.MaxAttempts < 3 {
		errs = append(errs, fmt.Errorf("MaxAttempts: must be ≥ 3 (handler faults use attempts 1 and 2), got %d", c.MaxAttempts))
	}
	if c.Lease != 0 && c.Lease < time.Second {
		errs = append(errs, fmt.Errorf("Lease: must be ≥ 1s, got %s", c.Lease))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// rnd returns a float in [0, 1) from the run's seeded source.
func (c *Config) rnd() float64 {
	c.rng.mu.Lock()
	defer c.rng.mu.Unlock()
	return c.rng.r.Float64()
}

// berthPoints are the injection points the harness schedules, each as a
// panic (an error at Map would dead-letter a valid message: that is Map's
// contract for undecodable input, not a fault).
var berthPoints = transporttest.Points
