package sqlite

import (
	"github.com/berth-go/berth/transport/sqlqueue"
)

var _ sqlqueue.FleetDialect = Dialect{}

// FleetTables implements sqlqueue.FleetDialect. Booleans are integers (0,
// 1), times Unix milliseconds, like the queue tables'.
func (Dialect) FleetTables(n sqlqueue.Names) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{
		st(`CREATE TABLE IF NOT EXISTS ` + n.Listeners + ` (
	instance_id   TEXT    NOT NULL,
	name          TEXT    NOT NULL,
	queue_table   TEXT    NOT NULL,
	host          TEXT    NOT NULL,
	pid           INTEGER NOT NULL,
	status        TEXT    NOT NULL,
	loop_state    TEXT    NOT NULL,
	wave          INTEGER NOT NULL,
	buffered      INTEGER NOT NULL,
	in_flight     INTEGER NOT NULL,
	batch_pending INTEGER NOT NULL,
	latched       INTEGER NOT NULL,
	faulted       INTEGER NOT NULL,
	fault         TEXT    NOT NULL,
	fault_at      INTEGER,
	rebuilds      INTEGER NOT NULL,
	last_receive  INTEGER,
	started_at    INTEGER,
	interval_ms   INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL,
	PRIMARY KEY (instance_id, name)
)`),
		st(`CREATE TABLE IF NOT EXISTS ` + n.Paused + ` (
	queue_table TEXT    NOT NULL PRIMARY KEY,
	paused_at   INTEGER NOT NULL,
	paused_by   TEXT    NOT NULL
)`),
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// UpsertListener implements sqlqueue.FleetDialect: INSERT … ON CONFLICT DO
// UPDATE, one statement; updated_at is the writer's clock (Dialect.Now).
func (d Dialect) UpsertListener(n sqlqueue.Names, r sqlqueue.ListenerRow) sqlqueue.Stmt {
	return st(`INSERT INTO `+n.Listeners+` (`+sqlqueue.ListenerColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)
ON CONFLICT (instance_id, name) DO UPDATE SET
	queue_table = excluded.queue_table, host = excluded.host, pid = excluded.pid,
	status = excluded.status, loop_state = excluded.loop_state, wave = excluded.wave,
	buffered = excluded.buffered, in_flight = excluded.in_flight, batch_pending = excluded.batch_pending,
	latched = excluded.latched, faulted = excluded.faulted, fault = excluded.fault, fault_at = excluded.fault_at,
	rebuilds = excluded.rebuilds, last_receive = excluded.last_receive, started_at = excluded.started_at,
	interval_ms = excluded.interval_ms, updated_at = excluded.updated_at`,
		r.Instance, r.Name, r.Queue, r.Host, int64(r.PID), r.Status, r.Loop,
		int64(r.Wave), int64(r.Buffered), int64(r.InFlight), int64(r.BatchPending),
		b2i(r.Latched), b2i(r.Faulted), r.Fault, sqlqueue.UnixMillis(r.FaultAt), r.Rebuilds,
		sqlqueue.UnixMillis(r.LastReceive), sqlqueue.UnixMillis(r.StartedAt), sqlqueue.Millis(r.Interval), d.now())
}

// DeleteListeners implements sqlqueue.FleetDialect.
func (Dialect) DeleteListeners(n sqlqueue.Names, instance string) sqlqueue.Stmt {
	return st(`DELETE FROM `+n.Listeners+` WHERE instance_id = ?`, instance)
}

// DeleteStaleListeners implements sqlqueue.FleetDialect.
func (d Dialect) DeleteStaleListeners(n sqlqueue.Names) sqlqueue.Stmt {
	return st(`DELETE FROM `+n.Listeners+` WHERE updated_at < ? - 10 * interval_ms`, d.now())
}

// Listeners implements sqlqueue.FleetDialect.
func (d Dialect) Listeners(n sqlqueue.Names) sqlqueue.Stmt {
	return st(`SELECT `+sqlqueue.ListenerColumns+`, ? FROM `+n.Listeners+` ORDER BY queue_table, name, instance_id`, d.now())
}

// PauseQueue implements sqlqueue.FleetDialect.
func (d Dialect) PauseQueue(n sqlqueue.Names, queue, by string) sqlqueue.Stmt {
	return st(`INSERT INTO `+n.Paused+` (queue_table, paused_at, paused_by) VALUES (?, ?, ?)
ON CONFLICT (queue_table) DO NOTHING RETURNING queue_table`, queue, d.now(), by)
}

// ResumeQueue implements sqlqueue.FleetDialect.
func (Dialect) ResumeQueue(n sqlqueue.Names, queue string) sqlqueue.Stmt {
	return st(`DELETE FROM `+n.Paused+` WHERE queue_table = ? RETURNING queue_table`, queue)
}

// PausedQueues implements sqlqueue.FleetDialect.
func (Dialect) PausedQueues(n sqlqueue.Names) sqlqueue.Stmt {
	return st(`SELECT queue_table, paused_at, paused_by FROM ` + n.Paused + ` ORDER BY queue_table`)
}
