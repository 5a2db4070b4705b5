package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/berth-go/berth/internal/sqlurl"
	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// DefaultMaxOpenConns is the default size of a pool opened with Open (the
// wake-up listener takes one of its connections).
const DefaultMaxOpenConns = 4

// DefaultSharedMaxConns is the default size of the process-wide pool that
// every publisher and subscriber opened from the same DSN (or URL) shares.
const DefaultSharedMaxConns = 10

// SubscriberConfig configures a PostgreSQL subscriber: the engine's config
// (sqlqueue.SubscriberConfig), whose DSN is a postgres://… or key=value
// connection string. The zero value (with DSN or DB set) is the defaults.
type SubscriberConfig = sqlqueue.SubscriberConfig

// PublisherConfig configures a PostgreSQL publisher: the engine's config
// (sqlqueue.PublisherConfig). The zero value (with DSN or DB set) is the
// defaults.
type PublisherConfig = sqlqueue.PublisherConfig

// Open opens a private database/sql pool over pgx (through Connector) with
// at most maxConns connections (DefaultMaxOpenConns when ≤ 0; at least 2,
// since a subscriber's wake-up listener holds one). The caller closes it.
// To share one pool among many publishers and subscribers, set DSN in
// their configs instead (or open them by URL). A malformed dsn is
// transport.ErrInvalidConfig.
func Open(dsn string, maxConns int) (*sql.DB, error) {
	if maxConns <= 0 {
		maxConns = DefaultMaxOpenConns
	}
	maxConns = max(maxConns, 2) // the wake-up listener holds one
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil { // pgx's message shows the DSN with its password masked
		return nil, fmt.Errorf("%w: postgres: DSN: %w", transport.ErrInvalidConfig, err)
	}
	db := sql.OpenDB(Connector(stdlib.GetConnector(*cfg)))
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// pools are the process-wide pools, one per DSN, that every publisher and
// subscriber opened from the same DSN (or URL) shares, with one wake-up
// listener.
var pools = &sqlqueue.SharedPools{Open: Open, Default: DefaultSharedMaxConns, Min: 2}

// NewSubscriber returns a subscriber on PostgreSQL. With cfg.DB nil it uses
// the process-wide pool of cfg.DSN (released on Close).
func NewSubscriber(cfg SubscriberConfig, logger watermill.LoggerAdapter) (*sqlqueue.Subscriber, error) {
	return sqlqueue.NewSubscriber(Dialect{}, cfg, logger)
}

// NewPublisher returns a publisher on PostgreSQL. With cfg.DB nil it uses
// the process-wide pool of cfg.DSN (released on Close).
func NewPublisher(cfg PublisherConfig, logger watermill.LoggerAdapter) (*sqlqueue.Publisher, error) {
	return sqlqueue.NewPublisher(Dialect{}, cfg, logger)
}

// SharedPool implements sqlqueue.PoolOpener: the process-wide pool of dsn
// (at least 2 connections: the wake-up listener holds one).
func (Dialect) SharedPool(dsn string, maxConns int) (*sql.DB, io.Closer, error) {
	return pools.Get(dsn, maxConns)
}

func init() {
	transport.Register("postgres", driver{})
	transport.Register("postgresql", driver{})
}

type driver struct{}

// connParams are the libpq/pgx connection parameters passed through to
// the driver untouched; every other parameter must be Berth's.
var connParams = []string{
	"application_name", "channel_binding", "client_encoding", "connect_timeout",
	"default_query_exec_mode", "description_cache_capacity", "fallback_application_name",
	"gssencmode", "host", "hostaddr", "krbspn", "krbsrvname", "options", "passfile", "password",
	"port", "search_path", "service", "servicefile", "sslcert", "sslkey", "sslmode",
	"sslnegotiation", "sslpassword", "sslrootcert", "sslsni", "statement_cache_capacity",
	"statement_timeout", "target_session_attrs", "timezone", "user", "dbname",
	"lock_timeout", "idle_in_transaction_session_timeout",
}

// parseURL splits u into the DSN (connection parameters only) and the
// connection parameters it marks as read in p.
func parseURL(u *url.URL, p *urlparam.Params) (dsn string, maxConns int) {
	q := u.Query()
	conn := url.Values{}
	for _, k := range connParams {
		if p.Has(k) {
			conn[k] = q[k]
		}
	}
	maxConns = p.Int("max_conns", DefaultSharedMaxConns, 2, 1000)
	du := *u
	du.Scheme = "postgres"
	du.RawQuery = conn.Encode()
	return du.String(), maxConns
}

func (driver) OpenPublisher(_ context.Context, u *url.URL, opts transport.Options) (message.Publisher, error) {
	p := urlparam.New(u.Query())
	var cfg PublisherConfig
	cfg.DSN, cfg.MaxOpenConns = parseURL(u, p)
	sqlurl.Publisher(p, &cfg)
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("%w: postgres URL: %w", transport.ErrInvalidConfig, err)
	}
	pub, err := NewPublisher(cfg, opts.Logger)
	if err != nil {
		return nil, err
	}
	return pub, nil
}

func (driver) OpenSubscriber(_ context.Context, u *url.URL, opts transport.Options) (transport.StatefulSubscriber, error) {
	p := urlparam.New(u.Query())
	var cfg SubscriberConfig
	cfg.DSN, cfg.MaxOpenConns = parseURL(u, p)
	sqlurl.Subscriber(p, &cfg)
	cfg.Pipeline.Observer = opts.Observer
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("%w: postgres URL: %w", transport.ErrInvalidConfig, err)
	}
	group, err := opts.ConsumerGroupFor(cfg.ConsumerGroup)
	if err != nil {
		return nil, fmt.Errorf("postgres URL: %w", err)
	}
	cfg.ConsumerGroup = group
	// Not NewSubscriber's result as it is: a nil *Subscriber in a
	// non-nil interface on error.
	sub, err := NewSubscriber(cfg, opts.Logger)
	if err != nil {
		return nil, err
	}
	return sub, nil
}
