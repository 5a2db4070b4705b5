package sqlqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/berth-go/berth/transport"
)

// ErrSchemaVersion is returned when the database's schema version is not
// the one this engine expects: newer (upgrade Berth), or older with
// Tables.ManualSchema set (apply the DDL).
var ErrSchemaVersion = errors.New("sqlqueue: unexpected schema version")

// MissingTableClassifier is implemented by dialects that can tell a
// "table does not exist" error apart; the engine then reports
// transport.ErrQueueNotFound.
type MissingTableClassifier interface {
	IsMissingTable(err error) bool
}

// TransientClassifier is implemented by dialects that can tell a transient
// error (the same statement run again may succeed) from a lasting one. The
// engine then runs an operation again, up to three more times with a short
// jittered backoff, longer after an outage (OutageClassifier; see the
// package documentation, Statement retries):
// the fenced follow-ups, claims, dead-letters and sweeps after any error
// IsTransient reports, and publish inserts only after those NotCommitted
// reports. Neither method may report a context's cancellation or deadline:
// the caller gave up.
type TransientClassifier interface {
	// IsTransient reports whether err is worth running the statement (or
	// transaction) again: the database rolled it back (a deadlock victim, a
	// lock timeout, a serialization failure), refused it before running it
	// (throttling, a database failing over), or the connection broke — in
	// which case it may have committed before the reply was lost.
	IsTransient(err error) bool
	// NotCommitted reports whether err guarantees that the statement (or
	// transaction) took no effect: a subset of IsTransient, without the
	// errors after which it may have committed (a connection lost
	// mid-statement).
	NotCommitted(err error) bool
}

// OutageClassifier is implemented by TransientClassifier dialects that can
// tell an outage — the database failing over, throttling, or short of
// resources: errors that last seconds to a minute — from a brief conflict
// (a deadlock victim, a lock timeout) or a lost connection. After an
// outage, the settlements (Begin, Complete, Renew, Retry, Release,
// DeadLetter) and publish inserts wait seconds between runs and run again
// until their context ends (see the package documentation, Statement
// retries), rather than giving up within a hundred milliseconds.
type OutageClassifier interface {
	// IsOutage reports whether err, one that IsTransient reports, says the
	// database is unavailable or throttling.
	IsOutage(err error) bool
}

// engine is the state shared by one Publisher's or Subscriber's work: the
// pool, the dialect, names, counters, and the schema already ensured.
type engine struct {
	db *sql.DB
	// hot runs the claims, the lease gate, the settlements and
	// single-statement inserts: db, or a stmtCache over it for a
	// PreparedDialect that asks for one.
	hot    querier
	d      Dialect
	tables Tables
	names  Names
	ctrs   *Counters
	// backoff runs operations again after transient errors (retry).
	backoff backoff

	mu       sync.Mutex
	sharedOK bool
	queues   map[string]bool // queue tables ensured (and subscribed, key "s:"+name)
}

func newEngine(db *sql.DB, d Dialect, t Tables) *engine {
	t = t.withDefaults()
	var hot querier = db
	if pd, ok := d.(PreparedDialect); ok && pd.PrepareStatements() {
		hot = newStmtCache(db)
	}
	return &engine{db: db, hot: hot, d: d, tables: t, names: NamesFor(d, t), ctrs: &Counters{}, backoff: defaultBackoff, queues: map[string]bool{}}
}

func (e *engine) queue(topic, group string) Queue { return QueueFor(e.d, e.tables, topic, group) }

func (e *engine) lockKey(what string) string {
	return e.tables.Schema + "." + e.tables.Prefix + what
}

func (e *engine) latest() int {
	ms := e.d.Migrations(e.names)
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// ensureShared checks the session and brings the shared tables to the
// latest version, once per engine.
func (e *engine) ensureShared(ctx context.Context) error { return e.ensureSharedIn(ctx, nil) }

// ensureSharedIn is ensureShared inside in, the caller's transaction, when
// in is not nil (see txPublisher.inside): nothing is remembered then, as
// in may roll back, and no session check runs (it needs a connection of
// its own).
func (e *engine) ensureSharedIn(ctx context.Context, in *sql.Tx) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sharedOK {
		return nil
	}
	var q querier = e.db
	if in != nil {
		q = in
	} else if c, ok := e.d.(SessionChecker); ok {
		if err := c.Check(ctx, e.db); err != nil {
			return fmt.Errorf("sqlqueue: %s session check: %w", e.d.Name(), err)
		}
	}
	want := e.latest()
	// Fast path: no lock when the version is already right. Not in the
	// caller's transaction, unless the schema is managed by hand: a
	// failed query (no version table) would abort it on PostgreSQL.
	var have int
	err := errors.New("in the caller's transaction")
	if in == nil || e.tables.ManualSchema {
		err = query(ctx, q, &e.ctrs.other, e.d.SchemaVersion(e.names), func(r *sql.Rows) error { return r.Scan(&have) })
	}
	switch {
	case err == nil && have == want:
		e.sharedOK = in == nil
		return nil
	case err == nil && have > want:
		return fmt.Errorf("%w: the database has version %d, this build knows up to %d", ErrSchemaVersion, have, want)
	case e.tables.ManualSchema:
		if err != nil {
			return fmt.Errorf("%w: reading it failed (%v); apply the DDL (sqlqueue.DDL) first", ErrSchemaVersion, err)
		}
		return fmt.Errorf("%w: the database has version %d, want %d; apply the DDL (sqlqueue.DDL) first", ErrSchemaVersion, have, want)
	}
	if m, ok := e.d.(QueueMigrator); ok && err == nil && have > 0 && in == nil {
		if err := e.migrateQueues(ctx, m); err != nil {
			return fmt.Errorf("sqlqueue: upgrade queue tables: %w", err)
		}
	}
	err = e.run(ctx, in, func(tx *sql.Tx) error {
		if _, err := lockAcquired(ctx, tx, &e.ctrs.other, e.d.Lock(e.lockKey("schema"), true)); err != nil {
			return fmt.Errorf("schema lock: %w", err)
		}
		for _, st := range e.d.VersionTable(e.names) {
			if err := query(ctx, tx, &e.ctrs.other, st, nil); err != nil {
				return err
			}
		}
		have = 0
		if err := query(ctx, tx, &e.ctrs.other, e.d.SchemaVersion(e.names), func(r *sql.Rows) error { return r.Scan(&have) }); err != nil {
			return err
		}
		if have > want {
			return fmt.Errorf("%w: the database has version %d, this build knows up to %d", ErrSchemaVersion, have, want)
		}
		for _, m := range e.d.Migrations(e.names) {
			if m.Version <= have {
				continue
			}
			for _, st := range m.Stmts {
				if err := query(ctx, tx, &e.ctrs.other, st, nil); err != nil {
					return fmt.Errorf("migration %d: %w", m.Version, err)
				}
			}
		}
		if have < want {
			return query(ctx, tx, &e.ctrs.other, e.d.SetSchemaVersion(e.names, want), nil)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlqueue: create schema: %w", err)
	}
	e.sharedOK = in == nil
	return nil
}

// QueueMigrator is implemented by dialects whose migrations alter every
// subscribed queue table (SQL Server's index upgrades). Before it applies
// the migrations to a database that has some (version 1 or later), the
// engine brings each subscribed queue table up to date in a transaction of
// its own, under the schema lock, so that a table is locked only while it
// upgrades, not until every other table has; the migrations' own
// transaction then finds little left to do.
type QueueMigrator interface {
	// QueueTables returns a statement selecting the unquoted names of the
	// subscribed queue tables (one column).
	QueueTables(n Names) Stmt
	// MigrateQueue returns idempotent statements bringing q's table to
	// the latest version.
	MigrateQueue(q Queue) []Stmt
}

// migrateQueues runs m.MigrateQueue for every subscribed queue table, one
// transaction (run again after a transient error) per table.
func (e *engine) migrateQueues(ctx context.Context, m QueueMigrator) error {
	var names []string
	err := query(ctx, e.db, &e.ctrs.other, m.QueueTables(e.names), func(r *sql.Rows) error {
		var n string
		if err := r.Scan(&n); err != nil {
			return err
		}
		names = append(names, n)
		return nil
	})
	if err != nil {
		return err
	}
	for _, n := range names {
		q := Queue{Name: n, Table: qualify(e.d, e.tables.Schema, n), Errors: e.names.Errors}
		err := e.run(ctx, nil, func(tx *sql.Tx) error {
			if _, err := lockAcquired(ctx, tx, &e.ctrs.other, e.d.Lock(e.lockKey("schema"), true)); err != nil {
				return fmt.Errorf("schema lock: %w", err)
			}
			_, err := runAll(ctx, tx, &e.ctrs.other, m.MigrateQueue(q))
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}

// run calls fn in in, the caller's transaction, or in a transaction of its
// own when in is nil.
func (e *engine) run(ctx context.Context, in *sql.Tx, fn func(*sql.Tx) error) error {
	if in != nil {
		return fn(in)
	}
	// Schema work is idempotent (IF NOT EXISTS, upserts, a registration
	// that copies parked rows only when it inserts the subscription), so a
	// transient error, a connection cut mid-DDL say, runs it again, as any
	// statement would, rather than failing the caller's Subscribe.
	return e.retry(ctx, watermill.NopLogger{}, "schema", idempotent, func() error {
		return inTx(ctx, e.db, &e.ctrs.txs, fn)
	})
}

// ensureQueue creates q's table (unless ManualSchema) and, with subscribe,
// records the subscription, once per engine. A consumer group's
// subscription (q.Group != "") is a registration (see register) when the
// dialect parks messages.
func (e *engine) ensureQueue(ctx context.Context, q Queue, subscribe bool) error {
	return e.ensureQueueIn(ctx, nil, q, subscribe)
}

// ensureQueueIn is ensureQueue inside in, the caller's transaction, when in
// is not nil: nothing is remembered then, as in may roll back.
func (e *engine) ensureQueueIn(ctx context.Context, in *sql.Tx, q Queue, subscribe bool) error {
	if err := checkNames(e.d, q.Topic, q.Group); err != nil {
		return err
	}
	if err := e.ensureSharedIn(ctx, in); err != nil {
		return err
	}
	key := q.Name
	if subscribe {
		key = "s:" + q.Name
	}
	e.mu.Lock()
	done := e.queues[key]
	e.mu.Unlock()
	if done {
		return nil
	}
	pd, parking := e.d.(ParkingDialect)
	parking = parking && subscribe && q.Group != ""
	if parking {
		// The default queue holds the parked rows the group's first
		// registration copies.
		if err := e.ensureQueueIn(ctx, in, e.queue(q.Topic, ""), false); err != nil {
			return err
		}
	}
	err := e.run(ctx, in, func(tx *sql.Tx) error {
		create := !e.tables.ManualSchema
		if qc, ok := e.d.(QueueChecker); ok && create {
			exists := false
			err := query(ctx, tx, &e.ctrs.other, qc.QueueExists(q), func(r *sql.Rows) error { return r.Scan(&exists) })
			if err != nil {
				return err
			}
			create = !exists
		}
		if create {
			if _, err := lockAcquired(ctx, tx, &e.ctrs.other, e.d.Lock(e.lockKey("schema"), true)); err != nil {
				return fmt.Errorf("schema lock: %w", err)
			}
			if u, ok := e.d.(QueueUpgrader); ok {
				for _, up := range u.UpgradeQueue(q) {
					old := false
					if err := query(ctx, tx, &e.ctrs.other, up.Probe, func(r *sql.Rows) error { return r.Scan(&old) }); err != nil {
						return err
					}
					if !old {
						continue
					}
					for _, st := range up.Upgrade {
						if err := query(ctx, tx, &e.ctrs.other, st, nil); err != nil {
							return fmt.Errorf("upgrade: %w", err)
						}
					}
				}
			}
			for _, st := range e.d.CreateQueue(q) {
				if err := query(ctx, tx, &e.ctrs.other, st, nil); err != nil {
					return err
				}
			}
		}
		switch {
		case parking:
			return e.register(ctx, tx, pd, q)
		case subscribe:
			return query(ctx, tx, &e.ctrs.other, e.d.Subscribe(e.names, q), nil)
		}
		return nil
	})
	if err != nil {
		return e.wrapQueueErr(q, fmt.Errorf("sqlqueue: create queue %s: %w", q.Name, err))
	}
	if in != nil {
		return nil
	}
	e.mu.Lock()
	e.queues[key] = true
	if subscribe {
		e.queues[q.Name] = true
	}
	e.mu.Unlock()
	if subscribe {
		subscriptionsGen.Add(1) // publishers of this process look again
	}
	return nil
}

// reprovision re-creates a queue table found missing at run time (dropped
// by an operator, a restored database), unless the schema is managed by
// hand, and records q's subscription when subscribe (a subscriber's own
// queue; a publisher records none). It reports whether the queue exists
// again.
func (e *engine) reprovision(ctx context.Context, q Queue, subscribe bool) bool {
	if e.tables.ManualSchema {
		return false
	}
	e.mu.Lock()
	delete(e.queues, q.Name)
	delete(e.queues, "s:"+q.Name)
	e.sharedOK = false // the shared tables may be gone too
	e.mu.Unlock()
	return e.ensureQueue(ctx, q, subscribe) == nil
}

func (e *engine) wrapQueueErr(q Queue, err error) error {
	if c, ok := e.d.(MissingTableClassifier); ok && c.IsMissingTable(err) {
		return fmt.Errorf("%w: %s (topic %q, group %q): %w", transport.ErrQueueNotFound, q.Name, q.Topic, q.Group, err)
	}
	return err
}

// DDL returns the statements that create the shared tables at the latest
// version and the queue table of each (topic, group) pair in queues, as one
// script for DBAs who apply schema by hand (then set Tables.ManualSchema).
// Subscriptions are rows, not schema: subscribers record theirs at run
// time.
func DDL(d Dialect, t Tables, queues ...QueueRef) string {
	t = t.withDefaults()
	n := NamesFor(d, t)
	var b strings.Builder
	write := func(sts []Stmt) {
		for _, st := range sts {
			b.WriteString(strings.TrimSpace(st.SQL))
			b.WriteString(";\n\n")
		}
	}
	fmt.Fprintf(&b, "-- Berth SQL queue schema (%s dialect)\n\n", d.Name())
	write(d.VersionTable(n))
	ms := d.Migrations(n)
	for _, m := range ms {
		fmt.Fprintf(&b, "-- version %d\n", m.Version)
		write(m.Stmts)
	}
	if len(ms) > 0 {
		write([]Stmt{d.SetSchemaVersion(n, ms[len(ms)-1].Version)})
	}
	for _, r := range queues {
		q := QueueFor(d, t, r.Topic, r.ConsumerGroup)
		fmt.Fprintf(&b, "-- queue of topic %q, consumer group %q\n", r.Topic, r.ConsumerGroup)
		write(d.CreateQueue(q))
	}
	return b.String()
}
