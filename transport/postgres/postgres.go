package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// DefaultMaxOpenConns is the default pool size of a publisher or subscriber
// that opens its own pool (the wake-up listener takes one of them).
const DefaultMaxOpenConns = 4

// SubscriberConfig configures a PostgreSQL subscriber: the engine's config
// plus how to open the pool.
type SubscriberConfig struct {
	sqlqueue.SubscriberConfig

	// DSN opens a pool (postgres://… or key=value) when DB is nil.
	DSN string
	// MaxOpenConns sizes the pool opened from DSN. Defaults to
	// DefaultMaxOpenConns (4). URL: max_conns.
	MaxOpenConns int
}

// PublisherConfig configures a PostgreSQL publisher.
type PublisherConfig struct {
	sqlqueue.PublisherConfig

	// DSN opens a pool (postgres://… or key=value) when DB is nil.
	DSN string
	// MaxOpenConns sizes the pool opened from DSN. Defaults to
	// DefaultMaxOpenConns (4). URL: max_conns.
	MaxOpenConns int
}

// Open opens a database/sql pool over pgx with at most maxConns
// connections (DefaultMaxOpenConns when ≤ 0; at least 2, since a
// subscriber's wake-up listener holds one).
func Open(dsn string, maxConns int) (*sql.DB, error) {
	if maxConns <= 0 {
		maxConns = DefaultMaxOpenConns
	}
	maxConns = max(maxConns, 2) // the wake-up listener holds one
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// NewSubscriber returns a subscriber on PostgreSQL. With cfg.DB nil it
// opens (and on Close closes) a pool from cfg.DSN.
func NewSubscriber(cfg SubscriberConfig, logger watermill.LoggerAdapter) (*sqlqueue.Subscriber, error) {
	c := cfg.SubscriberConfig
	c.Dialect = Dialect{}
	if logger != nil {
		c.Logger = logger
	}
	if c.DB == nil {
		if cfg.DSN == "" {
			return nil, fmt.Errorf("%w: DSN: required when DB is nil", transport.ErrInvalidConfig)
		}
		db, err := Open(cfg.DSN, cfg.MaxOpenConns)
		if err != nil {
			return nil, err
		}
		c.DB, c.Closer = db, db
	}
	s, err := sqlqueue.NewSubscriber(c)
	if err != nil && c.Closer != nil {
		_ = c.Closer.Close()
	}
	return s, err
}

// NewPublisher returns a publisher on PostgreSQL. With cfg.DB nil it opens
// (and on Close closes) a pool from cfg.DSN.
func NewPublisher(cfg PublisherConfig, logger watermill.LoggerAdapter) (*sqlqueue.Publisher, error) {
	c := cfg.PublisherConfig
	c.Dialect = Dialect{}
	if logger != nil {
		c.Logger = logger
	}
	if c.DB == nil {
		if cfg.DSN == "" {
			return nil, fmt.Errorf("%w: DSN: required when DB is nil", transport.ErrInvalidConfig)
		}
		db, err := Open(cfg.DSN, cfg.MaxOpenConns)
		if err != nil {
			return nil, err
		}
		c.DB, c.Closer = db, db
	}
	p, err := sqlqueue.NewPublisher(c)
	if err != nil && c.Closer != nil {
		_ = c.Closer.Close()
	}
	return p, err
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
	maxConns = p.Int("max_conns", DefaultMaxOpenConns, 2, 1000)
	du := *u
	du.Scheme = "postgres"
	du.RawQuery = conn.Encode()
	return du.String(), maxConns
}

func (driver) OpenPublisher(_ context.Context, u *url.URL, opts transport.Options) (message.Publisher, error) {
	p := urlparam.New(u.Query())
	var cfg PublisherConfig
	cfg.DSN, cfg.MaxOpenConns = parseURL(u, p)
	cfg.PublisherConfig.ParseURL(p)
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("%w: postgres URL: %w", transport.ErrInvalidConfig, err)
	}
	return NewPublisher(cfg, opts.Logger)
}

func (driver) OpenSubscriber(_ context.Context, u *url.URL, opts transport.Options) (message.Subscriber, error) {
	p := urlparam.New(u.Query())
	var cfg SubscriberConfig
	cfg.DSN, cfg.MaxOpenConns = parseURL(u, p)
	cfg.SubscriberConfig.ParseURL(p)
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("%w: postgres URL: %w", transport.ErrInvalidConfig, err)
	}
	return NewSubscriber(cfg, opts.Logger)
}
