package inspect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth-go/berth/internal/sqlurl"
	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlite"
	"golang.org/x/sync/errgroup"

	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqlserver"
)

// ErrNotSQL is returned by OpenSQL for a URL of a transport without tables.
var ErrNotSQL = errors.New("inspect: not a SQL transport URL")

// ErrNoDatabase is returned by Open when the URL names a SQLite file or a
// schema that does not exist: inspecting never creates them.
var ErrNoDatabase = errors.New("no such database")

// SQL is one SQL deployment: a pool, its dialect and where its tables are.
type SQL struct {
	DB      *sql.DB
	Dialect sqlqueue.Dialect
	Tables  sqlqueue.Tables
	Names   sqlqueue.Names
	// Kind is "postgres", "sqlite" or "sqlserver".
	Kind   string
	closer io.Closer
	open   func() (*sql.DB, io.Closer, error)
	path   string // the SQLite file; "" for other kinds and :memory:
	where  string // the redacted URL, for errors
	now    func() time.Time
}

// pgConnParams mirrors transport/postgres's pass-through connection
// parameters (unexported there).
var pgConnParams = []string{
	"application_name", "channel_binding", "client_encoding", "connect_timeout",
	"default_query_exec_mode", "description_cache_capacity", "fallback_application_name",
	"gssencmode", "host", "hostaddr", "krbspn", "krbsrvname", "options", "passfile", "password",
	"port", "search_path", "service", "servicefile", "sslcert", "sslkey", "sslmode",
	"sslnegotiation", "sslpassword", "sslrootcert", "sslsni", "statement_cache_capacity",
	"statement_timeout", "target_session_attrs", "timezone", "user", "dbname",
	"lock_timeout", "idle_in_transaction_session_timeout",
}

// PlanSQL parses a postgres://, postgresql://, sqlite:// or sqlserver://
// URL (the transports' URLs, every Berth parameter accepted) without
// connecting: enough for DDL. Other schemes return ErrNotSQL; a bad
// parameter returns an error wrapping transport.ErrInvalidConfig that names
// it.
func PlanSQL(rawURL string) (*SQL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: bad URL: %w", transport.ErrInvalidConfig, err)
	}
	s := &SQL{now: time.Now, where: u.Redacted()}
	switch u.Scheme {
	case "postgres", "postgresql":
		p := urlparam.New(u.Query())
		conn := url.Values{}
		for _, k := range pgConnParams {
			if p.Has(k) {
				conn[k] = u.Query()[k]
			}
		}
		p.Int("max_conns", 2, 2, 1000)
		var sc sqlqueue.SubscriberConfig
		sqlurl.Subscriber(p, &sc)
		var pc sqlqueue.PublisherConfig
		sqlurl.Publisher(p, &pc)
		if err := p.Err(); err != nil {
			return nil, fmt.Errorf("%w: postgres URL: %w", transport.ErrInvalidConfig, err)
		}
		du := *u
		du.Scheme = "postgres"
		du.RawQuery = conn.Encode()
		dsn := du.String()
		s.Dialect, s.Tables, s.Kind = postgres.Dialect{}, sc.Tables, "postgres"
		s.open = func() (*sql.DB, io.Closer, error) {
			db, err := postgres.Open(dsn, 2)
			return db, db, err
		}
	case "sqlite":
		path, err := sqlite.PathFromURL(u)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", transport.ErrInvalidConfig, err)
		}
		p := urlparam.New(u.Query())
		var sc sqlqueue.SubscriberConfig
		sqlurl.Subscriber(p, &sc)
		var pc sqlqueue.PublisherConfig
		sqlurl.Publisher(p, &pc)
		if err := p.Err(); err != nil {
			return nil, fmt.Errorf("%w: sqlite URL: %w", transport.ErrInvalidConfig, err)
		}
		s.Dialect, s.Tables, s.Kind = sqlite.Dialect{}, sc.Tables, "sqlite"
		if path != sqlite.Memory {
			s.path = path
		}
		s.open = func() (*sql.DB, io.Closer, error) {
			db, closer, err := sqlite.Open(path)
			return db, closer, err
		}
	case "sqlserver":
		cfg, err := sqlserver.ParseSubscriberURL(u)
		if err != nil {
			return nil, err
		}
		s.Dialect, s.Tables, s.Kind = sqlserver.Dialect{}, cfg.Tables, "sqlserver"
		s.open = func() (*sql.DB, io.Closer, error) {
			db, err := sqlserver.Open(cfg.DSN, 2)
			return db, db, err
		}
	default:
		return nil, fmt.Errorf("%w: %q", ErrNotSQL, u.Scheme)
	}
	if s.Tables.Prefix == "" {
		s.Tables.Prefix = sqlqueue.DefaultTablePrefix
	}
	s.Names = sqlqueue.NamesFor(s.Dialect, s.Tables)
	return s, nil
}

// OpenSQL is PlanSQL, then it opens a pool and checks that the database
// answers. A SQLite file that does not exist is created (as the
// transports do), for Migrate.
func OpenSQL(ctx context.Context, rawURL string) (*SQL, error) {
	return openSQL(ctx, rawURL, false)
}

// openSQL is OpenSQL; with existing, a SQLite file or a schema (URL
// parameter schema) that does not exist is ErrNoDatabase, and nothing is
// created.
func openSQL(ctx context.Context, rawURL string, existing bool) (*SQL, error) {
	s, err := PlanSQL(rawURL)
	if err != nil {
		return nil, err
	}
	if existing && s.path != "" {
		if _, err := os.Stat(s.path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: no file %s", ErrNoDatabase, s.path)
		}
	}
	db, closer, err := s.open()
	if err != nil {
		return nil, err
	}
	s.DB, s.closer = db, closer
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.DB.PingContext(pctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("cannot reach %s at %s: %w", s.Kind, s.where, err)
	}
	if existing && s.Tables.Schema != "" {
		ok, err := s.schemaExists(ctx)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("look up schema %s: %w", s.Tables.Schema, err)
		}
		if !ok {
			_ = s.Close()
			return nil, fmt.Errorf("%w: schema %s does not exist at %s", ErrNoDatabase, s.Tables.Schema, s.where)
		}
	}
	return s, nil
}

// schemaExists reports whether the tables' schema exists (PostgreSQL, SQL
// Server; SQLite has none).
func (s *SQL) schemaExists(ctx context.Context) (bool, error) {
	var q string
	switch s.Kind {
	case "postgres":
		q = `SELECT count(*) FROM pg_namespace WHERE nspname = $1`
	case "sqlserver":
		q = `SELECT count(*) FROM sys.schemas WHERE name = @p1`
	default:
		return true, nil
	}
	var n int
	if err := s.DB.QueryRowContext(ctx, q, s.Tables.Schema).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// Close closes the pool.
func (s *SQL) Close() error {
	if s.closer == nil {
		return nil
	}
	c := s.closer
	s.closer = nil
	return c.Close()
}

// DDL returns the schema script for DBAs: the shared tables and the queue
// table of each (topic, group) pair. SQL Server's is sqlcmd-ready (GO
// between batches).
func (s *SQL) DDL(queues ...sqlqueue.QueueRef) string {
	if s.Kind == "sqlserver" {
		return sqlserver.DDL(s.Tables, queues...)
	}
	return sqlqueue.DDL(s.Dialect, s.Tables, queues...)
}

// ph returns the i-th (1-based) placeholder of the dialect.
func (s *SQL) ph(i int) string {
	switch s.Kind {
	case "postgres":
		return "$" + strconv.Itoa(i)
	case "sqlserver":
		return "@p" + strconv.Itoa(i)
	default:
		return "?"
	}
}

func (s *SQL) exec(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, st sqlqueue.Stmt) error {
	rows, err := q.QueryContext(ctx, st.SQL, st.Args...)
	if err != nil {
		return err
	}
	for {
		for rows.Next() {
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		_ = rows.Close()
		return err
	}
	return rows.Close()
}

// Version returns the applied schema version and the one this build
// creates; have is 0 when the schema does not exist yet.
func (s *SQL) Version(ctx context.Context) (have, want int, err error) {
	ms := s.Dialect.Migrations(s.Names)
	if len(ms) > 0 {
		want = ms[len(ms)-1].Version
	}
	if err := s.DB.QueryRowContext(ctx, s.Dialect.SchemaVersion(s.Names).SQL, s.Dialect.SchemaVersion(s.Names).Args...).Scan(&have); err != nil {
		if s.tableMissing(ctx, s.Names.VersionName, err) {
			return 0, want, nil
		}
		return 0, want, fmt.Errorf("read schema version: %w", err)
	}
	return have, want, nil
}

// Migrate creates the shared tables or upgrades them to this build's
// version under the cluster-wide schema lock (as a starting subscriber
// does), then creates or upgrades the queue table of every subscription
// and of each (topic, group) pair in queues, and registers each pair's
// consumer group (a pair without a group only creates the topic's default
// queue): see sqlqueue.RegisterGroup. It returns the versions before
// and after. The SQL Server session is checked first.
func (s *SQL) Migrate(ctx context.Context, queues ...sqlqueue.QueueRef) (from, to int, err error) {
	if c, ok := s.Dialect.(sqlqueue.SessionChecker); ok {
		if err := c.Check(ctx, s.DB); err != nil {
			return 0, 0, fmt.Errorf("session check: %w", err)
		}
	}
	lockKey := s.Tables.Schema + "." + s.Tables.Prefix + "schema"
	ms := s.Dialect.Migrations(s.Names)
	want := 0
	if len(ms) > 0 {
		want = ms[len(ms)-1].Version
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.exec(ctx, tx, s.Dialect.Lock(lockKey, true)); err != nil {
			return fmt.Errorf("schema lock: %w", err)
		}
		for _, st := range s.Dialect.VersionTable(s.Names) {
			if err := s.exec(ctx, tx, st); err != nil {
				return err
			}
		}
		v := s.Dialect.SchemaVersion(s.Names)
		if err := tx.QueryRowContext(ctx, v.SQL, v.Args...).Scan(&from); err != nil {
			return err
		}
		if from > want {
			return fmt.Errorf("%w: the database has version %d, this build knows up to %d", sqlqueue.ErrSchemaVersion, from, want)
		}
		for _, m := range ms {
			if m.Version <= from {
				continue
			}
			for _, st := range m.Stmts {
				if err := s.exec(ctx, tx, st); err != nil {
					return fmt.Errorf("migration %d: %w", m.Version, err)
				}
			}
		}
		if from < want {
			if err := s.exec(ctx, tx, s.Dialect.SetSchemaVersion(s.Names, want)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return from, from, fmt.Errorf("migrate: %w", err)
	}
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return from, want, err
	}
	for _, q := range queues {
		subs = append(subs, sqlqueue.QueueFor(s.Dialect, s.Tables, q.Topic, q.ConsumerGroup))
	}
	for _, q := range subs {
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			if err := s.exec(ctx, tx, s.Dialect.Lock(lockKey, true)); err != nil {
				return fmt.Errorf("schema lock: %w", err)
			}
			if u, ok := s.Dialect.(sqlqueue.QueueUpgrader); ok { // SQLite: columns added by hand-guarded DDL
				for _, up := range u.UpgradeQueue(q) {
					old := false
					if err := tx.QueryRowContext(ctx, up.Probe.SQL, up.Probe.Args...).Scan(&old); err != nil {
						return err
					}
					if !old {
						continue
					}
					for _, st := range up.Upgrade {
						if err := s.exec(ctx, tx, st); err != nil {
							return err
						}
					}
				}
			}
			for _, st := range s.Dialect.CreateQueue(q) {
				if err := s.exec(ctx, tx, st); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return from, want, fmt.Errorf("migrate queue %s: %w", q.Name, err)
		}
	}
	for _, q := range queues {
		if q.ConsumerGroup == "" {
			continue
		}
		// Registered as its subscribers will be, with the parked messages
		// copied: from now on every publish reaches the group.
		if err := sqlqueue.RegisterGroup(ctx, s.Dialect, s.DB, s.Tables, q.Topic, q.ConsumerGroup); err != nil {
			return from, want, fmt.Errorf("migrate: register group %q of topic %q: %w", q.ConsumerGroup, q.Topic, err)
		}
	}
	return from, want, nil
}

func (s *SQL) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// subscriptions returns the subscribed queues, by table name.
func (s *SQL) subscriptions(ctx context.Context) ([]sqlqueue.Queue, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT topic, consumer_group, queue_table FROM `+s.Names.Subscriptions+` ORDER BY queue_table`)
	if err != nil {
		if s.tableMissing(ctx, s.Names.SubscriptionsName, err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read subscriptions: %w", err)
	}
	defer rows.Close()
	var out []sqlqueue.Queue
	for rows.Next() {
		var topic, group, table string
		if err := rows.Scan(&topic, &group, &table); err != nil {
			return nil, err
		}
		q := sqlqueue.QueueFor(s.Dialect, s.Tables, topic, group)
		if q.Name != table {
			q = s.queueByName(table)
			q.Topic, q.Group = topic, group
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// queueByName returns the queue of an unquoted table name whose topic is
// unknown.
func (s *SQL) queueByName(name string) sqlqueue.Queue {
	q := sqlqueue.Queue{Name: name, Errors: s.Names.Errors}
	if s.Tables.Schema == "" {
		q.Table = s.Dialect.QuoteIdent(name)
	} else {
		q.Table = s.Dialect.QuoteIdent(s.Tables.Schema) + "." + s.Dialect.QuoteIdent(name)
	}
	return q
}

// tableMissing reports whether a statement on the unquoted table failed
// with err because the table does not exist: the dialect says err is a
// missing table's (where it can tell), and the catalog answered and has no
// such table. Such a statement reads as empty. Any other failure (the
// database unreachable, the pool closed, permission denied, which also
// hides the table from the catalog) is no evidence of absence: the caller
// returns err, never "nothing there".
func (s *SQL) tableMissing(ctx context.Context, name string, err error) bool {
	if c, ok := s.Dialect.(sqlqueue.MissingTableClassifier); ok && !c.IsMissingTable(err) {
		return false
	}
	ok, lerr := s.tableExists(ctx, name)
	return lerr == nil && !ok
}

// Ping checks that the database answers, within ctx.
func (s *SQL) Ping(ctx context.Context) error {
	if err := s.DB.PingContext(ctx); err != nil {
		return fmt.Errorf("cannot reach %s at %s: %w", s.Kind, s.where, err)
	}
	return nil
}

// tableExists reports whether the unquoted table exists in the tables'
// schema (or the connection's default).
func (s *SQL) tableExists(ctx context.Context, name string) (bool, error) {
	var q string
	var args []any
	switch s.Kind {
	case "sqlite":
		q, args = `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, []any{name}
	case "postgres":
		if s.Tables.Schema == "" {
			q, args = `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1`, []any{name}
		} else {
			q, args = `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2`, []any{s.Tables.Schema, name}
		}
	case "sqlserver":
		if s.Tables.Schema == "" {
			q, args = `SELECT count(*) FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = SCHEMA_NAME() AND TABLE_NAME = @p1`, []any{name}
		} else {
			q, args = `SELECT count(*) FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = @p1 AND TABLE_NAME = @p2`, []any{s.Tables.Schema, name}
		}
	}
	var n int
	if err := s.DB.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// queueTables lists the tables named like queue tables (prefix + "q_").
func (s *SQL) queueTables(ctx context.Context) ([]string, error) {
	like := strings.NewReplacer(`\`, `\\`, `_`, `\_`, `%`, `\%`).Replace(s.Tables.Prefix+"q_") + "%"
	var q string
	var args []any
	switch s.Kind {
	case "sqlite":
		q, args = `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ? ESCAPE '\'`, []any{like}
	case "postgres":
		if s.Tables.Schema == "" {
			q, args = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE $1 ESCAPE '\'`, []any{like}
		} else {
			q, args = `SELECT table_name FROM information_schema.tables WHERE table_schema = $2 AND table_name LIKE $1 ESCAPE '\'`, []any{like, s.Tables.Schema}
		}
	case "sqlserver":
		if s.Tables.Schema == "" {
			q, args = `SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = SCHEMA_NAME() AND TABLE_NAME LIKE @p1 ESCAPE '\'`, []any{like}
		} else {
			q, args = `SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = @p2 AND TABLE_NAME LIKE @p1 ESCAPE '\'`, []any{like, s.Tables.Schema}
		}
	}
	rows, err := s.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list queue tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// Queues implements Inspector: every queue table (subscribed, found in the
// catalog by its prefix, or named by dead letters), with its rows counted
// by state and its dead letters.
func (s *SQL) Queues(ctx context.Context) ([]QueueStats, error) { return s.queues(ctx, 0) }

// QueuesUpTo is Queues with each state's count stopped at max (ReadyMore,
// DelayedMore and InFlightMore say where it stopped): the cost of a count
// is the index entries it reads, so a page listing every queue of a
// deployment with millions of pending rows reads at most max+1 entries
// per queue and state (QueueCountCap) instead of all of them.
func (s *SQL) QueuesUpTo(ctx context.Context, max int64) ([]QueueStats, error) {
	return s.queues(ctx, max)
}

// QueueCountCap is where the console's list of queues stops counting a
// state's rows (see QueuesUpTo).
const QueueCountCap = 10_000

// queues is Queues, counting up to upTo rows per state when upTo > 0.
func (s *SQL) queues(ctx context.Context, upTo int64) ([]QueueStats, error) {
	byName := map[string]*QueueStats{}
	queues := map[string]sqlqueue.Queue{}
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range subs {
		queues[q.Name] = q
	}
	tables, err := s.queueTables(ctx)
	if err != nil {
		return nil, err
	}
	existing := map[string]bool{}
	for _, t := range tables {
		existing[t] = true
		if _, ok := queues[t]; !ok {
			queues[t] = s.queueByName(t)
		}
	}
	parked := s.parkedQueues(subs, queues)
	dead, err := s.deadCounts(ctx)
	if err != nil {
		return nil, err
	}
	for t := range dead {
		if _, ok := queues[t]; !ok {
			queues[t] = s.queueByName(t)
		}
	}
	// One counting statement per queue, a few at a time: a deployment of
	// a hundred queues answers in a few round trips' time.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(countParallel)
	for name, q := range queues {
		st := &QueueStats{Queue: name, Topic: q.Topic, Group: q.Group, DeadLettered: dead[name].n, DeadLetteredMore: dead[name].more, Parked: parked[name]}
		byName[name] = st
		if !existing[name] {
			st.Missing = true
			continue
		}
		g.Go(func() error {
			if err := s.countQueue(gctx, q, st, upTo); err != nil {
				return fmt.Errorf("count %s: %w", name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make([]QueueStats, 0, len(byName))
	for _, st := range byName {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out, s.markPaused(ctx, out)
}

// parkedQueues finds, among queues (by table name; their topics filled in
// where found), the default queues no default reader subscribed to: the
// messages there are parked for consumer groups registered later (see
// package sqlqueue, Consumer groups). A default queue's topic is known
// from the subscriptions of its groups, or read back from a plain table
// name (prefix + "q_" + topic); a hashed name of a topic nobody
// subscribed to is not recognised.
func (s *SQL) parkedQueues(subs []sqlqueue.Queue, queues map[string]sqlqueue.Queue) map[string]bool {
	subscribed := map[string]bool{}
	defaults := map[string]string{} // default queue name → topic
	for _, q := range subs {
		subscribed[q.Name] = true
		defaults[sqlqueue.QueueFor(s.Dialect, s.Tables, q.Topic, "").Name] = q.Topic
	}
	prefix := s.Tables.Prefix
	if prefix == "" {
		prefix = sqlqueue.DefaultTablePrefix
	}
	parked := map[string]bool{}
	for name, q := range queues {
		if subscribed[name] {
			continue
		}
		topic, ok := defaults[name]
		if raw, plain := strings.CutPrefix(name, prefix+"q_"); !ok && plain && !strings.Contains(raw, "__") &&
			sqlqueue.QueueTableName(prefix, raw, "") == name {
			topic, ok = raw, true
		}
		if ok {
			q.Topic, q.Group = topic, ""
			queues[name] = q
			parked[name] = true
		}
	}
	return parked
}

// countParallel is how many queues Queues counts at once.
const countParallel = 4

// countQueue counts q's rows by state with one statement of four
// subqueries, each answered from one of the queue table's partial indexes
// (pending: state = 0 by due_at; leased: state <> 0) rather than by
// reading the table, and sets st's counts and OldestReady. With upTo > 0
// each count stops after upTo+1 rows and reports upTo, with its More flag.
func (s *SQL) countQueue(ctx context.Context, q sqlqueue.Queue, st *QueueStats, upTo int64) error {
	query, args := s.countQuery(q, upTo)
	var oldest any
	if err := s.DB.QueryRowContext(ctx, query, args...).Scan(&st.Ready, &st.Delayed, &st.InFlight, &oldest); err != nil {
		return err
	}
	if upTo > 0 {
		capAt := func(n *int64, more *bool) {
			if *n > upTo {
				*n, *more = upTo, true
			}
		}
		capAt(&st.Ready, &st.ReadyMore)
		capAt(&st.Delayed, &st.DelayedMore)
		capAt(&st.InFlight, &st.InFlightMore)
	}
	if oldest != nil {
		if age := s.now().Sub(toTime(oldest)); age > 0 {
			st.OldestReady = age
		}
	}
	return nil
}

// countQuery is countQueue's statement and its arguments. "now" is
// nowSQL's: on SQL Server a variable the batch declares (qb.text), so that
// forced parameterization leaves the statement's `state = 0` literals, and
// the filtered pending index, alone.
func (s *SQL) countQuery(q sqlqueue.Queue, upTo int64) (string, []any) {
	b := &qb{s: s}
	count := func(where string) string {
		switch {
		case upTo <= 0:
			return `(SELECT count(*) FROM ` + q.Table + ` WHERE ` + where + `)`
		case s.Kind == "sqlserver":
			return `(SELECT count(*) FROM (SELECT TOP (` + strconv.FormatInt(upTo+1, 10) + `) 1 AS x FROM ` + q.Table + ` WHERE ` + where + `) AS c)`
		default:
			return `(SELECT count(*) FROM (SELECT 1 FROM ` + q.Table + ` WHERE ` + where + ` LIMIT ` + strconv.FormatInt(upTo+1, 10) + `) AS c)`
		}
	}
	query := `SELECT
	` + count(`state = 0 AND due_at <= `+s.nowSQL(b)) + `,
	` + count(`state = 0 AND due_at > `+s.nowSQL(b)) + `,
	` + count(`state <> 0`) + `,
	(SELECT min(due_at) FROM ` + q.Table + ` WHERE state = 0 AND due_at <= ` + s.nowSQL(b) + `)`
	return b.text(query), b.args
}

// DeadCountCap is where the per-queue dead-letter counts stop on
// PostgreSQL and SQLite: a count reads at most DeadCountCap+1 index
// entries per queue, so the queue list costs the same with a million dead
// letters as with ten thousand (QueueStats.DeadLetteredMore says there are
// more).
const DeadCountCap = 10_000

// deadCount is one queue's dead letters, capped where the dialect caps.
type deadCount struct {
	n    int64
	more bool
}

// deadCountsQuery is deadCounts' statement, and whether it caps.
func (s *SQL) deadCountsQuery() (query string, capped bool) {
	e := s.Names.Errors
	query = `SELECT queue_table, count(*) FROM ` + e + ` GROUP BY queue_table`
	capped = s.Kind == "postgres" || s.Kind == "sqlite"
	if capped {
		lim := strconv.Itoa(DeadCountCap + 1)
		query = `WITH RECURSIVE qs(q) AS (
	SELECT (SELECT queue_table FROM ` + e + ` ORDER BY queue_table LIMIT 1)
	UNION ALL
	SELECT (SELECT queue_table FROM ` + e + ` WHERE queue_table > qs.q ORDER BY queue_table LIMIT 1) FROM qs WHERE qs.q IS NOT NULL
)
SELECT q, (SELECT count(*) FROM (SELECT 1 FROM ` + e + ` WHERE queue_table = qs.q LIMIT ` + lim + `) AS c) FROM qs WHERE q IS NOT NULL`
	}
	return query, capped
}

// deadCounts counts each queue's dead letters. On PostgreSQL and SQLite
// it finds the queues with a skip scan of the error table's queue index
// (one index probe per queue, a recursive CTE) and counts each up to
// DeadCountCap+1 entries of that index, instead of grouping every row;
// SQL Server, whose recursive CTEs take no subqueries, groups over the
// same index.
func (s *SQL) deadCounts(ctx context.Context) (map[string]deadCount, error) {
	query, capped := s.deadCountsQuery()
	rows, err := s.DB.QueryContext(ctx, query)
	if err != nil {
		if s.tableMissing(ctx, s.Names.ErrorsName, err) {
			return map[string]deadCount{}, nil
		}
		return nil, fmt.Errorf("count dead letters: %w", err)
	}
	defer rows.Close()
	out := map[string]deadCount{}
	for rows.Next() {
		var t string
		var n int64
		if err := rows.Scan(&t, &n); err != nil {
			return nil, err
		}
		c := deadCount{n: n}
		if capped && n > DeadCountCap {
			c = deadCount{n: DeadCountCap, more: true}
		}
		out[t] = c
	}
	return out, rows.Err()
}

// checkQueue returns an error wrapping transport.ErrQueueNotFound unless
// name is a known queue: a subscribed topic or queue table, a queue table
// in the catalog (by its name or its topic's), or the queue of dead letters.
func (s *SQL) checkQueue(ctx context.Context, name string, subs []sqlqueue.Queue) error {
	for _, q := range subs {
		if q.Name == name || q.Topic == name {
			return nil
		}
	}
	tables, err := s.queueTables(ctx)
	if err != nil {
		return err
	}
	byTopic := sqlqueue.QueueFor(s.Dialect, s.Tables, name, "").Name
	for _, t := range tables {
		if t == name || t == byTopic {
			return nil
		}
	}
	if ok, err := s.hasDead(ctx, name); ok || err != nil {
		return err
	}
	return fmt.Errorf("%w: %q is no queue table or topic here", transport.ErrQueueNotFound, name)
}

// hasDead reports whether queue has a dead letter: one probe of the error
// table's queue index.
func (s *SQL) hasDead(ctx context.Context, queue string) (bool, error) {
	query := `SELECT 1 FROM ` + s.Names.Errors + ` WHERE queue_table = ` + s.ph(1) + ` LIMIT 1`
	if s.Kind == "sqlserver" {
		query = `SELECT TOP (1) 1 FROM ` + s.Names.Errors + ` WHERE queue_table = ` + s.ph(1)
	}
	var one int
	err := s.DB.QueryRowContext(ctx, query, queue).Scan(&one)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	}
	if s.tableMissing(ctx, s.Names.ErrorsName, err) {
		return false, nil
	}
	return false, fmt.Errorf("find dead letters of %s: %w", queue, err)
}

func toTime(v any) time.Time {
	switch t := v.(type) {
	case time.Time:
		return t
	case int64:
		return time.UnixMilli(t)
	case float64:
		return time.UnixMilli(int64(t))
	case []byte:
		n, _ := strconv.ParseInt(string(t), 10, 64)
		return time.UnixMilli(n)
	case string:
		if n, err := strconv.ParseInt(t, 10, 64); err == nil {
			return time.UnixMilli(n)
		}
		tt, _ := time.Parse(time.RFC3339Nano, t)
		return tt
	}
	return time.Time{}
}

func plainRows(rs []errRow) []DeadLetter {
	out := make([]DeadLetter, len(rs))
	for i, r := range rs {
		out[i] = r.DeadLetter
	}
	return out
}

// Queue returns one queue's counts, by table name or by topic (its
// default consumer group), without counting the other queues: the console's
// queue page. An unknown name is an error wrapping
// transport.ErrQueueNotFound.
func (s *SQL) Queue(ctx context.Context, name string) (QueueStats, error) {
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return QueueStats{}, err
	}
	var q sqlqueue.Queue
	found := false
	for _, sub := range subs {
		if sub.Name == name || (sub.Topic == name && sub.Group == "") {
			q, found = sub, true
			break
		}
	}
	tables, err := s.queueTables(ctx)
	if err != nil {
		return QueueStats{}, err
	}
	has := map[string]bool{}
	for _, t := range tables {
		has[t] = true
	}
	if !found {
		if byTopic := sqlqueue.QueueFor(s.Dialect, s.Tables, name, "").Name; has[byTopic] {
			q, found = s.queueByName(byTopic), true
		} else if has[name] {
			q, found = s.queueByName(name), true
		}
	}
	exists := found && has[q.Name]
	if !found {
		ok, err := s.hasDead(ctx, name)
		if err != nil {
			return QueueStats{}, err
		}
		if !ok {
			return QueueStats{}, fmt.Errorf("%w: %q is not a queue here", transport.ErrQueueNotFound, name)
		}
		q = s.queueByName(name)
	}
	st := QueueStats{Queue: q.Name, Topic: q.Topic, Group: q.Group, Missing: !exists}
	lim := DeadCountCap + 1
	query := `SELECT count(*) FROM (SELECT 1 AS x FROM ` + s.Names.Errors + ` WHERE queue_table = ` + s.ph(1) + ` LIMIT ` + strconv.Itoa(lim) + `) AS c`
	if s.Kind == "sqlserver" {
		query = `SELECT count(*) FROM (SELECT TOP (` + strconv.Itoa(lim) + `) 1 AS x FROM ` + s.Names.Errors + ` WHERE queue_table = ` + s.ph(1) + `) AS c`
	}
	if err := s.DB.QueryRowContext(ctx, query, q.Name).Scan(&st.DeadLettered); err != nil {
		if !s.tableMissing(ctx, s.Names.ErrorsName, err) {
			return QueueStats{}, fmt.Errorf("count dead letters of %s: %w", q.Name, err)
		}
	}
	if st.DeadLettered > DeadCountCap {
		st.DeadLettered, st.DeadLetteredMore = DeadCountCap, true
	}
	if exists {
		if err := s.countQueue(ctx, q, &st, 0); err != nil {
			return QueueStats{}, fmt.Errorf("count %s: %w", q.Name, err)
		}
	}
	one := []QueueStats{st}
	err = s.markPaused(ctx, one)
	return one[0], err
}
