package sqlqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrFleetUnsupported is returned by the fleet functions for a dialect that
// does not implement FleetDialect.
var ErrFleetUnsupported = errors.New("sqlqueue: the dialect keeps no fleet tables")

// FleetDialect is implemented by dialects that keep the fleet's two shared
// tables: the listeners table, where each subscriber with a FleetInterval
// reports its listeners' states, and the paused table, whose rows pause a
// queue in every process (see the package documentation, Fleet).
//
// # The tables
//
// The listeners table (Names.Listeners), primary key (instance_id, name):
//
//	instance_id   text: the reporting subscriber (host/pid/random)
//	name          text: the listener's name (topic, or topic/group)
//	queue_table   text: the unquoted queue table name it consumes
//	host, pid     where the subscriber runs
//	status        transport.Status as text (accepting, paused, faulted…)
//	loop_state    transport.LoopState as text
//	wave, buffered, in_flight, batch_pending  integers
//	latched, faulted  booleans (bit on SQL Server, integer on SQLite)
//	fault         text: the fault's cause, "" when none
//	fault_at, last_receive, started_at  bigint Unix milliseconds of the
//	              process clock, NULL when unknown
//	rebuilds      bigint
//	interval_ms   bigint: the reporter's interval
//	updated_at    bigint Unix milliseconds of the database clock (SQLite:
//	              of the writer's clock), set by every upsert
//
// The paused table (Names.Paused), primary key queue_table: queue_table
// (unquoted queue table name), paused_at (bigint Unix milliseconds of the
// database clock), paused_by (text: who or why, "" when not given).
//
// Times are Unix milliseconds in every dialect, so the engine reads them
// the same way everywhere; staleness is measured against the database's
// clock (Listeners returns it), so skewed process clocks do not make rows
// look stale.
type FleetDialect interface {
	// FleetTables returns idempotent DDL creating both tables.
	FleetTables(n Names) []Stmt
	// UpsertListener writes r's row (keyed by r.Instance and r.Name),
	// setting updated_at to the database's now: one statement, which
	// updates the row and inserts it when there is none. No rows.
	UpsertListener(n Names, r ListenerRow) Stmt
	// DeleteListeners deletes every row of instance. No rows.
	DeleteListeners(n Names, instance string) Stmt
	// DeleteStaleListeners deletes the rows not updated for ten of their
	// own intervals (a crashed process's). No rows.
	DeleteStaleListeners(n Names) Stmt
	// Listeners selects every listener row with the columns in
	// ListenerColumns order, then the database's now (bigint Unix
	// milliseconds), ordered by queue_table, name, instance_id.
	Listeners(n Names) Stmt
	// PauseQueue inserts queue's paused row unless there is one; it
	// returns one row (any column) when it inserted.
	PauseQueue(n Names, queue, by string) Stmt
	// ResumeQueue deletes queue's paused row; it returns one row (any
	// column) when there was one.
	ResumeQueue(n Names, queue string) Stmt
	// PausedQueues selects queue_table, paused_at, paused_by of every
	// paused row.
	PausedQueues(n Names) Stmt
}

// ListenerColumns are the listeners table's columns in the order
// FleetDialect.Listeners selects them (updated_at last, then the database's
// now).
const ListenerColumns = "instance_id, name, queue_table, host, pid, status, loop_state, wave, buffered, in_flight, batch_pending, latched, faulted, fault, fault_at, rebuilds, last_receive, started_at, interval_ms, updated_at"

// MaxFaultText is the longest fault text a listener row keeps, in bytes;
// longer ones are cut (at a UTF-8 boundary) and end with "…".
const MaxFaultText = 2000

// ListenerRow is one row of the listeners table.
type ListenerRow struct {
	Instance string // the reporting subscriber: host/pid/random
	Name     string // the listener's name
	Queue    string // the unquoted queue table name
	Host     string
	PID      int
	Status   string // transport.Status.String()
	Loop     string // transport.LoopState.String()

	Wave, Buffered, InFlight, BatchPending int

	Latched, Faulted bool
	Fault            string    // the fault's cause; "" when none
	FaultAt          time.Time // zero when unknown
	Rebuilds         int64
	LastReceive      time.Time // zero when none yet
	StartedAt        time.Time // zero when unknown

	// Interval is the reporter's interval: a row older than three of them
	// is stale.
	Interval time.Duration
	// UpdatedAt is when the row was last written, by the database's clock
	// (set by the upsert; ignored when writing).
	UpdatedAt time.Time
}

// PausedQueue is one row of the paused table.
type PausedQueue struct {
	Queue    string    // the unquoted queue table name
	PausedAt time.Time // by the database's clock
	By       string    // who or why; "" when not given
}

// UnixMillis encodes t as a nullable Unix millisecond count: NULL for the
// zero time. Dialects bind it as is (a bigint whatever its value).
func UnixMillis(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

func fromMillis(v sql.NullInt64) time.Time {
	if !v.Valid || v.Int64 == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64)
}

func fleetDialect(d Dialect) (FleetDialect, error) {
	f, ok := d.(FleetDialect)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrFleetUnsupported, d.Name())
	}
	return f, nil
}

// EnsureFleet creates the fleet tables of n when they are missing, under
// the schema lock.
func EnsureFleet(ctx context.Context, db *sql.DB, d Dialect, n Names) error {
	var rt, tx atomic.Int64
	return ensureFleet(ctx, db, d, n, lockKeyOf(n, "schema"), &rt, &tx)
}

func lockKeyOf(n Names, what string) string { return n.Schema + "." + n.Prefix + what }

func ensureFleet(ctx context.Context, db *sql.DB, d Dialect, n Names, lockKey string, rt, txs *atomic.Int64) error {
	f, err := fleetDialect(d)
	if err != nil {
		return err
	}
	err = inTx(ctx, db, txs, func(tx *sql.Tx) error {
		if _, err := lockAcquired(ctx, tx, rt, d.Lock(lockKey, true)); err != nil {
			return fmt.Errorf("schema lock: %w", err)
		}
		for _, st := range f.FleetTables(n) {
			if err := query(ctx, tx, rt, st, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlqueue: creating the fleet tables: %w", err)
	}
	return nil
}

// ReadListeners returns every row of the listeners table and the
// database's clock at the time of reading. A missing table (no subscriber
// ever reported) is no error: no rows.
func ReadListeners(ctx context.Context, db *sql.DB, d Dialect, n Names) ([]ListenerRow, time.Time, error) {
	f, err := fleetDialect(d)
	if err != nil {
		return nil, time.Time{}, err
	}
	var (
		rows []ListenerRow
		now  int64
		rt   atomic.Int64
	)
	err = query(ctx, db, &rt, f.Listeners(n), func(r *sql.Rows) error {
		var (
			l                          ListenerRow
			pid                        int64
			wave, buf, infl, batch     int64
			faultAt, lastRecv, started sql.NullInt64
			interval, updated          int64
		)
		if err := r.Scan(&l.Instance, &l.Name, &l.Queue, &l.Host, &pid, &l.Status, &l.Loop,
			&wave, &buf, &infl, &batch, &l.Latched, &l.Faulted, &l.Fault, &faultAt, &l.Rebuilds,
			&lastRecv, &started, &interval, &updated, &now); err != nil {
			return err
		}
		l.PID, l.Wave, l.Buffered, l.InFlight, l.BatchPending = int(pid), int(wave), int(buf), int(infl), int(batch)
		l.FaultAt, l.LastReceive, l.StartedAt = fromMillis(faultAt), fromMillis(lastRecv), fromMillis(started)
		l.Interval = time.Duration(interval) * time.Millisecond
		l.UpdatedAt = time.UnixMilli(updated)
		rows = append(rows, l)
		return nil
	})
	if err != nil {
		if missingTable(d, err) {
			return nil, time.Time{}, nil
		}
		return nil, time.Time{}, err
	}
	if now == 0 {
		return rows, time.Time{}, nil
	}
	return rows, time.UnixMilli(now), nil
}

// PausedQueues returns the paused table's rows. A missing table is no
// error: nothing is paused.
func PausedQueues(ctx context.Context, db *sql.DB, d Dialect, n Names) ([]PausedQueue, error) {
	var rt atomic.Int64
	ps, err := readPaused(ctx, db, d, n, &rt)
	if err != nil && missingTable(d, err) {
		return nil, nil
	}
	return ps, err
}

func readPaused(ctx context.Context, q querier, d Dialect, n Names, rt *atomic.Int64) ([]PausedQueue, error) {
	f, err := fleetDialect(d)
	if err != nil {
		return nil, err
	}
	var out []PausedQueue
	err = query(ctx, q, rt, f.PausedQueues(n), func(r *sql.Rows) error {
		var (
			p  PausedQueue
			at int64
		)
		if err := r.Scan(&p.Queue, &at, &p.By); err != nil {
			return err
		}
		p.PausedAt = time.UnixMilli(at)
		out = append(out, p)
		return nil
	})
	return out, err
}

// PauseQueue pauses queue (an unquoted queue table name) in every process
// whose subscriber reports to the fleet tables: within one FleetInterval
// each of its listeners releases its prefetched rows and stops claiming.
// It creates the fleet tables when missing, and reports whether the queue
// was not paused already.
func PauseQueue(ctx context.Context, db *sql.DB, d Dialect, n Names, queue, by string) (bool, error) {
	return fleetWrite(ctx, db, d, n, func(f FleetDialect) Stmt { return f.PauseQueue(n, queue, by) })
}

// ResumeQueue undoes PauseQueue, and reports whether queue was paused.
func ResumeQueue(ctx context.Context, db *sql.DB, d Dialect, n Names, queue string) (bool, error) {
	return fleetWrite(ctx, db, d, n, func(f FleetDialect) Stmt { return f.ResumeQueue(n, queue) })
}

func fleetWrite(ctx context.Context, db *sql.DB, d Dialect, n Names, st func(FleetDialect) Stmt) (bool, error) {
	f, err := fleetDialect(d)
	if err != nil {
		return false, err
	}
	var rt atomic.Int64
	got, err := queryCount(ctx, db, &rt, st(f))
	if err != nil && missingTable(d, err) {
		if err = EnsureFleet(ctx, db, d, n); err == nil {
			got, err = queryCount(ctx, db, &rt, st(f))
		}
	}
	return got > 0, err
}

func missingTable(d Dialect, err error) bool {
	c, ok := d.(MissingTableClassifier)
	return ok && c.IsMissingTable(err)
}
