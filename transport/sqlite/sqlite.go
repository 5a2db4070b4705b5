package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/berth-go/berth/internal/sqlurl"
	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// Memory is the path of a process-private in-memory database, shared by
// every publisher and subscriber of this process that opens it.
const Memory = ":memory:"

// SubscriberConfig configures a SQLite subscriber: the engine's config
// (sqlqueue.SubscriberConfig), whose DSN is the database file's path
// (created if missing) or Memory, and whose MaxOpenConns may only be 0 or 1
// (the pool holds one connection). The zero value (with DSN or DB set) is
// the defaults.
type SubscriberConfig = sqlqueue.SubscriberConfig

// PublisherConfig configures a SQLite publisher: the engine's config
// (sqlqueue.PublisherConfig), with DSN as in SubscriberConfig.
type PublisherConfig = sqlqueue.PublisherConfig

// shared pools: one single-connection pool per database path in this
// process, reference counted, so publishers and subscribers never contend
// for SQLite's write lock with each other and Memory is one database.
var (
	poolsMu sync.Mutex
	pools   = map[string]*pool{}
)

type pool struct {
	key  string
	db   *sql.DB
	refs int
}

// Close releases one reference; the last one closes the database.
func (p *pool) Close() error {
	poolsMu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(pools, p.key)
	}
	poolsMu.Unlock()
	if last {
		return p.db.Close()
	}
	return nil
}

// Open returns the process-wide pool of the database at path (one
// connection, WAL journal, 10s busy timeout, transactions BEGIN
// IMMEDIATE). Close the returned closer when done; the pool closes with its
// last user.
func Open(path string) (*sql.DB, interface{ Close() error }, error) {
	key := path
	if path != Memory {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, nil, fmt.Errorf("sqlite: %w", err)
		}
		key = abs
	}
	poolsMu.Lock()
	defer poolsMu.Unlock()
	if p := pools[key]; p != nil {
		p.refs++
		return p.db, p, nil
	}
	dsn := "file:" + key + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	if key == Memory {
		dsn = "file::memory:?_txlock=immediate&_pragma=busy_timeout(10000)"
	} else {
		dsn += "&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(context.Background()); err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	p := &pool{key: key, db: db, refs: 1}
	pools[key] = p
	return db, p, nil
}

// NewSubscriber returns a subscriber on SQLite. With cfg.DB nil it uses the
// process-wide pool of the database at path cfg.DSN (see Open).
func NewSubscriber(cfg SubscriberConfig, logger watermill.LoggerAdapter) (*sqlqueue.Subscriber, error) {
	return sqlqueue.NewSubscriber(Dialect{}, cfg, logger)
}

// NewPublisher returns a publisher on SQLite. With cfg.DB nil it uses the
// process-wide pool of the database at path cfg.DSN (see Open).
func NewPublisher(cfg PublisherConfig, logger watermill.LoggerAdapter) (*sqlqueue.Publisher, error) {
	return sqlqueue.NewPublisher(Dialect{}, cfg, logger)
}

// SharedPool implements sqlqueue.PoolOpener: the process-wide pool of the
// database at path (see Open). It holds one connection: maxConns may only
// be 0 or 1.
func (Dialect) SharedPool(path string, maxConns int) (*sql.DB, io.Closer, error) {
	if maxConns > 1 {
		return nil, nil, fmt.Errorf("%w: MaxOpenConns: a SQLite pool holds one connection, got %d", transport.ErrInvalidConfig, maxConns)
	}
	db, closer, err := Open(path)
	if err != nil {
		return nil, nil, err
	}
	return db, closer, nil
}

func init() { transport.Register("sqlite", driver{}) }

type driver struct{}

// PathFromURL returns the database path of a sqlite:// URL:
// sqlite:///abs/path.db is absolute, sqlite://relative.db (host + path) is
// relative to the working directory, sqlite://:memory: is Memory.
func PathFromURL(u *url.URL) (string, error) {
	raw := u.Host + u.Path
	if u.Opaque != "" {
		raw = u.Opaque
	}
	if raw == "" {
		return "", fmt.Errorf("sqlite URL %q names no database file (sqlite:///abs/path.db, sqlite://relative.db, sqlite://:memory:)", u.Redacted())
	}
	if raw == Memory || strings.HasPrefix(raw, Memory) {
		return Memory, nil
	}
	if err := queryInPath(raw); err != nil {
		return "", err
	}
	return raw, nil
}

// queryInPath refuses a database file name that carries what was meant as
// a query: "cqrs2.db&consumer_group=X" (a parameter appended with & to a
// URL that had no ?) or an escaped "?" followed by key=value. Such a path
// would silently open (and create) a file of that name.
func queryInPath(raw string) error {
	base := raw[strings.LastIndexByte(raw, '/')+1:]
	i := strings.IndexAny(base, "&?")
	if i < 0 || !strings.Contains(base[i:], "=") {
		return nil
	}
	file, query := raw[:len(raw)-len(base)+i], strings.TrimLeft(base[i:], "&?")
	return fmt.Errorf("sqlite URL path %q holds what looks like query parameters (%q): "+
		"start the query with ? and separate parameters with &, as in sqlite://%s?%s "+
		"(for a consumer group, transport.WithConsumerGroup avoids editing the URL)",
		raw, query, file, query)
}

func (driver) OpenPublisher(_ context.Context, u *url.URL, opts transport.Options) (message.Publisher, error) {
	path, err := PathFromURL(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", transport.ErrInvalidConfig, err)
	}
	p := urlparam.New(u.Query())
	cfg := PublisherConfig{DSN: path}
	sqlurl.Publisher(p, &cfg)
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("%w: sqlite URL: %w", transport.ErrInvalidConfig, err)
	}
	pub, err := NewPublisher(cfg, opts.Logger)
	if err != nil {
		return nil, err
	}
	return pub, nil
}

func (driver) OpenSubscriber(_ context.Context, u *url.URL, opts transport.Options) (transport.StatefulSubscriber, error) {
	path, err := PathFromURL(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", transport.ErrInvalidConfig, err)
	}
	p := urlparam.New(u.Query())
	cfg := SubscriberConfig{DSN: path}
	sqlurl.Subscriber(p, &cfg)
	cfg.Pipeline.Observer = opts.Observer
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("%w: sqlite URL: %w", transport.ErrInvalidConfig, err)
	}
	if cfg.ConsumerGroup, err = opts.ConsumerGroupFor(cfg.ConsumerGroup); err != nil {
		return nil, fmt.Errorf("sqlite URL: %w", err)
	}
	// Not NewSubscriber's result as it is: a nil *Subscriber in a
	// non-nil interface on error.
	sub, err := NewSubscriber(cfg, opts.Logger)
	if err != nil {
		return nil, err
	}
	return sub, nil
}
