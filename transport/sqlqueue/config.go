package sqlqueue

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// Defaults of the config fields left zero.
const (
	// DefaultTablePrefix prefixes every table the engine creates.
	DefaultTablePrefix = "berth_"
	// DefaultLease is the processing lease; the pipeline renews it every
	// Lease/3 while user code holds the message.
	DefaultLease = 30 * time.Second
	// DefaultFetchTimeout is how long a claimed row may wait in a
	// subscriber's buffer before the sweeper returns it to pending.
	DefaultFetchTimeout = time.Minute
	// DefaultSweepInterval is the mean period of the sweeper (jittered by
	// ±25%).
	DefaultSweepInterval = 10 * time.Second
	// DefaultStatementTimeout bounds each settlement and sweep statement.
	DefaultStatementTimeout = 30 * time.Second
	// DefaultClaimTimeout bounds each claim statement.
	DefaultClaimTimeout = 10 * time.Second
	// DefaultMaxMessageSize is the largest accepted headers + body, in
	// bytes.
	DefaultMaxMessageSize = 1 << 20
	// DefaultWakeDebounce is the window in which wake-ups of one queue
	// coalesce into one.
	DefaultWakeDebounce = 25 * time.Millisecond
	// DefaultIdleProbeMax is the longest interval of a pool's idle probe:
	// the worst-case delay before a row that reached an idle queue without
	// a wake-up (another process's publish without NOTIFY, an outbox
	// transaction on another client, a notification lost in a leader
	// hand-off) is claimed.
	DefaultIdleProbeMax = 10 * time.Second
	// DefaultSubscriptionsTTL is how long a publisher reuses the
	// subscriptions it read for a topic.
	DefaultSubscriptionsTTL = time.Second
	// DefaultNotifyWindow is the window within which a publisher sends at
	// most one wake-up notification per queue (dialects with NOTIFY).
	DefaultNotifyWindow = 25 * time.Millisecond
	// DefaultSettleBatch is the largest group-committed batch of Begin,
	// Complete or Retry calls.
	DefaultSettleBatch = 256
	// DefaultSettleLinger is how long the first Begin or Complete after an
	// idle moment waits, at most, for others to share its statement.
	DefaultSettleLinger = 5 * time.Millisecond
	// DefaultParkedRetention is how long a message parked in a topic's
	// default queue (published while the topic had no subscription) waits
	// for consumer groups registered later, before the groups' sweeps
	// delete it.
	DefaultParkedRetention = 7 * 24 * time.Hour
)

// Tables locates the engine's tables. The zero value is the defaults.
type Tables struct {
	// Schema qualifies every table name. Defaults to "" (unqualified: the
	// connection's default schema or search_path).
	Schema string
	// Prefix starts every table name. Defaults to DefaultTablePrefix
	// ("berth_").
	Prefix string
	// ManualSchema, when true, never creates or migrates tables: they must
	// have been created from DDL, and a missing queue table fails with
	// transport.ErrQueueNotFound. Defaults to false (create what is missing,
	// under a cluster-wide lock).
	ManualSchema bool
}

func (t Tables) withDefaults() Tables {
	if t.Prefix == "" {
		t.Prefix = DefaultTablePrefix
	}
	return t
}

// SubscriberConfig configures a Subscriber. The zero value is the
// defaults, except that DB or DSN is required. The dialect is not part of
// it: it is the constructors' argument, and each dialect package declares
// its SubscriberConfig as this type (postgres.SubscriberConfig{DSN: dsn,
// Lease: time.Minute, Pipeline: receiver.Config{Concurrency: 64}}).
type SubscriberConfig struct {
	// DB is the connection pool. The caller owns it (see Closer). Defaults
	// to nil: the pool of DSN.
	DB *sql.DB
	// DSN, used when DB is nil, names the database whose process-wide pool
	// the subscriber uses: shared with every other publisher and subscriber
	// of the same dialect opened from the same DSN (or URL), and closed
	// with the last of them. PostgreSQL: postgres://… or key=value; SQL
	// Server: sqlserver://… or any go-mssqldb connection string; SQLite: the
	// database file's path (created if missing), or sqlite.Memory. The
	// dialect must implement PoolOpener. Required when DB is nil.
	DSN string
	// MaxOpenConns sizes the shared pool of DSN; when several users ask for
	// different sizes the pool takes the largest. Defaults to the dialect's
	// DefaultSharedMaxConns (PostgreSQL and SQL Server: 10); SQLite's pool
	// holds one connection, so it accepts only 0 or 1. URL: max_conns.
	MaxOpenConns int
	// Tables locates the tables.
	Tables Tables

	// Pipeline configures the shared receive pipeline (concurrency,
	// buffer, attempts, retry backoff, waves, back-pressure).
	Pipeline receiver.Config

	// ConsumerGroup selects the queue: each (topic, group) pair has its own
	// queue table, and publishing to a topic inserts one row per subscribed
	// group. Defaults to "" (the topic's default queue). URL:
	// consumer_group.
	ConsumerGroup string

	// Lease is the processing lease set at the lease gate and renewed every
	// Lease/3 while user code holds the message. Defaults to DefaultLease
	// (30s). URL: lease.
	Lease time.Duration
	// FetchTimeout is how long a claimed row may wait for a concurrency
	// permit before the sweeper returns it to pending. Defaults to
	// DefaultFetchTimeout (1m). URL: fetch_timeout.
	FetchTimeout time.Duration
	// SweepInterval is the mean period of the sweeper (lease recovery,
	// dead-lettering of expired last attempts, dropping rows past their
	// time-to-live), jittered by ±25% and run by one instance per cluster at
	// a time. Negative disables it. Defaults to DefaultSweepInterval (10s).
	// URL: sweep_interval.
	SweepInterval time.Duration
	// WakeDebounce is the window in which wake-ups of this subscriber's
	// queues (an in-process publish, a PostgreSQL NOTIFY) coalesce: the
	// first after a quiet window wakes at once, the ones within the window
	// after it coalesce into one at its end. Each goes to one idle source
	// of the queue per pool rather than to all (see the package
	// documentation, Wake-up). Negative wakes at once. Defaults to DefaultWakeDebounce (25ms). URL: wake_debounce.
	WakeDebounce time.Duration
	// IdleProbeMax bounds the interval of the pool's idle probe. A source
	// whose claim came back empty stops claiming until a wake-up (an
	// in-process publish, a NOTIFY, or the pool's probe) says rows
	// arrived; the probe checks every such queue of the pool in one
	// statement, at an interval that starts at the empty delay
	// (Pipeline.EmptyDelay), doubles while it finds nothing, up to
	// IdleProbeMax, and starts over on any activity. It is therefore the
	// worst-case latency of a message that reaches an idle queue without a
	// wake-up, and an idle pool's cost is one statement per IdleProbeMax.
	// The smallest value among a pool's subscribers applies. Negative
	// disables parking: every source claims after each empty delay, as
	// dialects without a MultiProbe always do. Defaults to
	// DefaultIdleProbeMax (10s). URL: idle_probe_max.
	IdleProbeMax time.Duration
	// StatementTimeout bounds each settlement and sweep statement. Defaults
	// to DefaultStatementTimeout (30s).
	StatementTimeout time.Duration
	// ClaimTimeout bounds each claim statement (and an idle probe), so
	// that a receive loop whose connection went into a blackhole claims
	// again on a fresh one within seconds, and recovers within a second of
	// the network healing rather than after StatementTimeout. A claim cut
	// short may have claimed rows nobody holds: the sweeper returns them
	// after FetchTimeout, attempts unchanged. Defaults to
	// DefaultClaimTimeout (10s), at most StatementTimeout. URL:
	// claim_timeout.
	ClaimTimeout time.Duration
	// SettleBatch is the largest group commit of Begin, Complete or Retry
	// calls. Defaults to DefaultSettleBatch (256).
	SettleBatch int
	// SettleLinger: the first Begin or Complete after an idle moment waits
	// up to this long for others to share its statement: less when
	// SettleBatch calls queue up, or when none has joined for a
	// millisecond (a lull: with few concurrency permits, waiting longer
	// for company that cannot come only slows the pipeline). Calls
	// arriving while a statement runs never wait.
	// Negative means no linger. Defaults to DefaultSettleLinger (5ms). URL:
	// settle_linger.
	SettleLinger time.Duration
	// AckHold: while the flow is light (the source's last claim came back
	// short or empty, and no claimed row waits in the buffer), an ack waits
	// up to this long for the source's next claim statement and is carried
	// by it (one statement and one transaction for both), then goes alone.
	// Only dialects whose claim can carry acks (AckRider: PostgreSQL, SQL
	// Server) use it. An ack holds its settle slot (or, with none free, its
	// concurrency permit) while it waits; rows are
	// deleted up to AckHold later than they would be. Negative: acks never
	// wait for a claim. Defaults to DefaultAckHold (50ms). URL: ack_hold.
	AckHold time.Duration
	// FleetInterval, when positive, makes the subscriber report its
	// listeners to the fleet tables every FleetInterval (one upsert per
	// listener) and honour the paused table: a listener of a paused queue
	// releases its prefetched rows and stops claiming within one interval,
	// and claims again within one interval of the resume (see the package
	// documentation, Fleet). The dialect must implement FleetDialect.
	// Defaults to 0: off. URL: fleet_interval.
	FleetInterval time.Duration
	// ParkedRetention: messages published to a topic with no subscription
	// at all are parked in its default queue, where every consumer group
	// registering later finds them (see the package documentation,
	// Consumer groups). A consumer group's sweep deletes those parked for
	// longer than ParkedRetention (unless the topic has a default reader,
	// which consumes them). Negative keeps them until a default reader
	// consumes them. Defaults to DefaultParkedRetention (7 days). URL:
	// parked_retention ("-1s" keeps them).
	ParkedRetention time.Duration

	// logger receives the subscriber's logs: the constructor's logger
	// argument (watermill.NopLogger when nil). Configs carry no logger, as
	// Watermill's do not: one input, the constructor's.
	logger watermill.LoggerAdapter
	// Closer, when set, is closed after the subscriber (to hand DB over
	// to it). Defaults to nil: the caller owns DB.
	Closer io.Closer
}

func (c SubscriberConfig) withDefaults() SubscriberConfig {
	c.Tables = c.Tables.withDefaults()
	c.Pipeline = c.Pipeline.WithDefaults()
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.FetchTimeout == 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = DefaultStatementTimeout
	}
	if c.ClaimTimeout == 0 {
		c.ClaimTimeout = min(DefaultClaimTimeout, c.StatementTimeout)
	}
	if c.IdleProbeMax == 0 {
		c.IdleProbeMax = DefaultIdleProbeMax
	}
	if c.WakeDebounce == 0 {
		c.WakeDebounce = DefaultWakeDebounce
	}
	if c.SettleBatch == 0 {
		c.SettleBatch = DefaultSettleBatch
	}
	if c.AckHold == 0 {
		c.AckHold = DefaultAckHold
	}
	if c.SettleLinger == 0 {
		c.SettleLinger = DefaultSettleLinger
	}
	if c.ParkedRetention == 0 {
		c.ParkedRetention = DefaultParkedRetention
	}
	if c.logger == nil {
		c.logger = watermill.NopLogger{}
	}
	return c
}

// Validate reports every invalid field at once, wrapped in
// transport.ErrInvalidConfig. The constructors also check what depends on
// their dialect (the length of ConsumerGroup, FleetInterval support, a
// pool for DSN).
func (c SubscriberConfig) Validate() error { return invalid(c.problems(nil, false)) }

// problems are Validate's, plus, when dialect is not nil, those of the
// checks that depend on it; borrowed: the caller opens no pool, DB is
// required.
func (c SubscriberConfig) problems(dialect Dialect, borrowed bool) []error {
	d := c.withDefaults()
	var errs []error
	errs = append(errs, validatePool(c.DB, c.DSN, c.MaxOpenConns, dialect, borrowed)...)
	if err := c.Pipeline.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Pipeline: %w", err))
	}
	if d.Lease < time.Second {
		errs = append(errs, fmt.Errorf("Lease: must be ≥ 1s, got %s", c.Lease))
	}
	if d.FetchTimeout < time.Second {
		errs = append(errs, fmt.Errorf("FetchTimeout: must be ≥ 1s, got %s", c.FetchTimeout))
	}
	if d.StatementTimeout < 0 {
		errs = append(errs, fmt.Errorf("StatementTimeout: must be > 0, got %s", c.StatementTimeout))
	}
	if d.ClaimTimeout < 0 {
		errs = append(errs, fmt.Errorf("ClaimTimeout: must be > 0, got %s", c.ClaimTimeout))
	}
	if d.IdleProbeMax > 0 && (d.IdleProbeMax < 100*time.Millisecond || d.IdleProbeMax > time.Hour) {
		errs = append(errs, fmt.Errorf("IdleProbeMax: must be from 100ms to 1h, or negative to disable, got %s", c.IdleProbeMax))
	}
	if d.WakeDebounce > time.Second {
		errs = append(errs, fmt.Errorf("WakeDebounce: must be ≤ 1s, got %s", c.WakeDebounce))
	}
	if d.AckHold > time.Second || d.AckHold > 0 && d.AckHold >= d.Lease/3 {
		errs = append(errs, fmt.Errorf("AckHold: must be ≤ 1s and shorter than a third of Lease (%s), or negative for none, got %s", d.Lease, c.AckHold))
	}
	if c.FleetInterval < 0 || (c.FleetInterval > 0 && (c.FleetInterval < 10*time.Millisecond || c.FleetInterval > time.Hour)) {
		errs = append(errs, fmt.Errorf("FleetInterval: must be from 10ms to 1h, or 0 for off, got %s", c.FleetInterval))
	} else if _, ok := dialect.(FleetDialect); c.FleetInterval > 0 && dialect != nil && !ok {
		errs = append(errs, fmt.Errorf("FleetInterval: the %s dialect keeps no fleet tables", dialect.Name()))
	}
	if d.SettleBatch < 1 || d.SettleBatch > 1000 {
		errs = append(errs, fmt.Errorf("SettleBatch: must be from 1 to 1000, got %d", c.SettleBatch))
	}
	errs = append(errs, validateTables(c.Tables)...)
	if dialect != nil {
		if err := nameLimits(dialect, "", c.ConsumerGroup); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// PublisherConfig configures a Publisher. The zero value is the defaults,
// except that DB or DSN is required. The dialect is the constructors'
// argument; each dialect package declares its PublisherConfig as this type.
type PublisherConfig struct {
	// DB is the connection pool. The caller owns it (see Closer). Defaults
	// to nil: the pool of DSN.
	DB *sql.DB
	// DSN, used when DB is nil, names the database whose process-wide pool
	// the publisher uses (see SubscriberConfig.DSN). Required when DB is
	// nil.
	DSN string
	// MaxOpenConns sizes the shared pool of DSN (see
	// SubscriberConfig.MaxOpenConns). URL: max_conns.
	MaxOpenConns int
	// Tables locates the tables.
	Tables Tables

	// MaxMessageSize is the largest accepted message, metadata (as JSON)
	// plus payload, in bytes; larger ones fail Publish with
	// transport.ErrMessageTooLarge. Defaults to DefaultMaxMessageSize
	// (1 MiB); at most the dialect's Limits().MessageSize (SQL Server:
	// sqlserver.MaxMessageSize, 16 MiB). URL: max_message_size.
	MaxMessageSize int
	// Delay delays every message by this much unless its metadata says
	// otherwise (MetadataDelay, MetadataDeliverAt, or Watermill's
	// components/delay keys). Defaults to 0. URL: delay.
	Delay time.Duration
	// TTL drops a message not delivered within this time of publishing
	// (counted in Stats.Expired). Defaults to 0: never. URL: ttl.
	TTL time.Duration
	// SubscriptionsTTL is how long the publisher reuses the list of queues
	// subscribed to a topic, so that a Publish is one round trip (the
	// INSERT). A subscription recorded in this process (Subscribe or
	// SubscribeInitialize of any subscriber) is seen by the next Publish; one
	// recorded by another process is seen after at most SubscriptionsTTL:
	// messages published meanwhile do not reach the new consumer group
	// (they go to the groups known before). Negative reads the subscriptions
	// on every Publish (two round trips). Defaults to
	// DefaultSubscriptionsTTL (1s). URL: subscriptions_ttl.
	SubscriptionsTTL time.Duration
	// NotifyWindow, for a dialect whose inserts send a wake-up notification
	// (PostgreSQL's NOTIFY: each one costs every listening backend a
	// transaction), is the window within which the publisher sends at most
	// one per queue: an insert less than NotifyWindow after the queue's
	// last notification leaves its own out. The next insert after the
	// window carries one that covers them; when none comes within another
	// window, one trailing notification goes out on its own, after every
	// such insert committed. A steady flow then costs one notification per
	// window, and subscribers in other processes see a message up to
	// 2 × NotifyWindow later than its own notification would have told
	// them (subscribers sharing the publisher's pool are woken at once,
	// in-process). Negative sends one with every insert.
	// Inserts of WithTx always carry theirs. Defaults to
	// DefaultNotifyWindow (25ms: the subscribers' default WakeDebounce, so a steady
	// flow's notifications each wake a subscriber at once). URL: notify_window.
	NotifyWindow time.Duration
	// Groups declares consumer groups per topic (topic → groups; the key
	// "*" declares groups of every topic the publisher publishes to).
	// Before its first Publish to a topic, the publisher registers the
	// topic's declared groups, as their subscribers' SubscribeInitialize
	// would (queue table, subscription, and a copy of the messages parked
	// so far): from then on every message reaches them, even before their
	// subscribers first start. Defaults to nil: none. URL: groups, as
	// topic:group pairs separated by commas
	// (groups=orders:billing,orders:shipping,*:audit).
	Groups map[string][]string

	// logger receives the publisher's logs: the constructor's logger
	// argument (watermill.NopLogger when nil).
	logger watermill.LoggerAdapter
	// Closer, when set, is closed after the publisher. Defaults to nil.
	Closer io.Closer
}

func (c PublisherConfig) withDefaults() PublisherConfig {
	c.Tables = c.Tables.withDefaults()
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.SubscriptionsTTL == 0 {
		c.SubscriptionsTTL = DefaultSubscriptionsTTL
	}
	if c.NotifyWindow == 0 {
		c.NotifyWindow = DefaultNotifyWindow
	}
	if c.logger == nil {
		c.logger = watermill.NopLogger{}
	}
	return c
}

// Validate reports every invalid field at once, wrapped in
// transport.ErrInvalidConfig. The constructors also check that their
// dialect can open a pool for DSN.
func (c PublisherConfig) Validate() error { return invalid(c.problems(nil, false)) }

// problems are Validate's, plus, when dialect is not nil, those of the
// checks that depend on it; borrowed: the caller opens no pool, DB is
// required.
func (c PublisherConfig) problems(dialect Dialect, borrowed bool) []error {
	d := c.withDefaults()
	var errs []error
	errs = append(errs, validatePool(c.DB, c.DSN, c.MaxOpenConns, dialect, borrowed)...)
	if d.MaxMessageSize < 1 {
		errs = append(errs, fmt.Errorf("MaxMessageSize: must be ≥ 1, got %d", c.MaxMessageSize))
	} else if err := messageSizeLimit(dialect, d.MaxMessageSize); err != nil {
		errs = append(errs, err)
	}
	if d.Delay < 0 {
		errs = append(errs, fmt.Errorf("Delay: must be ≥ 0, got %s", c.Delay))
	}
	if d.TTL < 0 {
		errs = append(errs, fmt.Errorf("TTL: must be ≥ 0, got %s", c.TTL))
	}
	if d.NotifyWindow > time.Second {
		errs = append(errs, fmt.Errorf("NotifyWindow: must be ≤ 1s, got %s", c.NotifyWindow))
	}
	errs = append(errs, c.groupsProblems(dialect)...)
	return append(errs, validateTables(c.Tables)...)
}

// groupsProblems checks Groups: topics and groups not empty, and, when
// dialect is not nil, within its name limits.
func (c PublisherConfig) groupsProblems(dialect Dialect) []error {
	var errs []error
	for _, topic := range slices.Sorted(maps.Keys(c.Groups)) {
		for _, g := range c.Groups[topic] {
			switch {
			case topic == "" || g == "":
				errs = append(errs, fmt.Errorf("Groups: topic and consumer group must not be empty, got %q:%q", topic, g))
			case dialect != nil:
				t := topic
				if t == "*" {
					t = ""
				}
				if err := nameLimits(dialect, t, g); err != nil {
					errs = append(errs, fmt.Errorf("Groups[%q]: %w", topic, err))
				}
			}
		}
	}
	return errs
}

// validateFor is the constructors' validation: a missing dialect, and the
// config's problems (errs).
func validateFor(d Dialect, errs []error) error {
	if d == nil {
		errs = append([]error{errors.New("dialect: required")}, errs...)
	}
	return invalid(errs)
}

// invalid wraps errs, if any, in transport.ErrInvalidConfig.
func invalid(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", transport.ErrInvalidConfig, errors.Join(errs...))
}

// validatePool checks how the pool is given: DB, or DSN and MaxOpenConns
// (which dialect, when not nil, must be able to open); borrowed: DB only.
func validatePool(db *sql.DB, dsn string, maxConns int, dialect Dialect, borrowed bool) []error {
	var errs []error
	if maxConns < 0 {
		errs = append(errs, fmt.Errorf("MaxOpenConns: must be ≥ 0, got %d", maxConns))
	}
	if db != nil {
		return errs
	}
	if borrowed {
		return append(errs, errors.New("DB: required (NewSource and NewFleetReporter open no pool from DSN)"))
	}
	if dsn == "" {
		return append(errs, errors.New("DSN: required when DB is nil"))
	}
	if _, ok := dialect.(PoolOpener); dialect != nil && !ok {
		errs = append(errs, fmt.Errorf("DB: required: the %s dialect opens no pool from DSN", dialect.Name()))
	}
	return errs
}

func validateTables(t Tables) []error {
	var errs []error
	d := t.withDefaults()
	if !identOK(d.Prefix) || len(d.Prefix) > 20 {
		errs = append(errs, fmt.Errorf("Tables.Prefix: must be 1 to 20 of [a-z0-9_] starting with a letter, got %q", t.Prefix))
	}
	if t.Schema != "" && (!identOK(t.Schema) || len(t.Schema) > 63) {
		errs = append(errs, fmt.Errorf("Tables.Schema: must be up to 63 of [a-z0-9_] starting with a letter, got %q", t.Schema))
	}
	return errs
}

func identOK(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
