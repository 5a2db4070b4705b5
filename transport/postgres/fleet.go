package postgres

import (
	"github.com/berth-go/berth/transport/sqlqueue"
)

var _ sqlqueue.FleetDialect = Dialect{}

// nowMillis is the database clock as Unix milliseconds (the fleet tables'
// time encoding).
const nowMillis = `(floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint`

// FleetTables implements sqlqueue.FleetDialect.
func (Dialect) FleetTables(n sqlqueue.Names) []sqlqueue.Stmt {
	return []sqlqueue.Stmt{
		st(`CREATE TABLE IF NOT EXISTS ` + n.Listeners + ` (
	instance_id   text    NOT NULL,
	name          text    NOT NULL,
	queue_table   text    NOT NULL,
	host          text    NOT NULL,
	pid           integer NOT NULL,
	status        text    NOT NULL,
	loop_state    text    NOT NULL,
	wave          integer NOT NULL,
	buffered      integer NOT NULL,
	in_flight     integer NOT NULL,
	batch_pending integer NOT NULL,
	latched       boolean NOT NULL,
	faulted       boolean NOT NULL,
	fault         text    NOT NULL,
	fault_at      bigint,
	rebuilds      bigint  NOT NULL,
	last_receive  bigint,
	started_at    bigint,
	interval_ms   bigint  NOT NULL,
	updated_at    bigint  NOT NULL,
	PRIMARY KEY (instance_id, name)
)`),
		st(`CREATE TABLE IF NOT EXISTS ` + n.Paused + ` (
	queue_table text   NOT NULL PRIMARY KEY,
	paused_at   bigint NOT NULL,
	paused_by   text   NOT NULL
)`),
	}
}

// UpsertListener implements sqlqueue.FleetDialect: INSERT … ON CONFLICT DO
// UPDATE, one statement.
func (Dialect) UpsertListener(n sqlqueue.Names, r sqlqueue.ListenerRow) sqlqueue.Stmt {
	return st(`INSERT INTO `+n.Listeners+` (`+sqlqueue.ListenerColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, `+nowMillis+`)
ON CONFLICT (instance_id, name) DO UPDATE SET
	queue_table = EXCLUDED.queue_table, host = EXCLUDED.host, pid = EXCLUDED.pid,
	status = EXCLUDED.status, loop_state = EXCLUDED.loop_state, wave = EXCLUDED.wave,
	buffered = EXCLUDED.buffered, in_flight = EXCLUDED.in_flight, batch_pending = EXCLUDED.batch_pending,
	latched = EXCLUDED.latched, faulted = EXCLUDED.faulted, fault = EXCLUDED.fault, fault_at = EXCLUDED.fault_at,
	rebuilds = EXCLUDED.rebuilds, last_receive = EXCLUDED.last_receive, started_at = EXCLUDED.started_at,
	interval_ms = EXCLUDED.interval_ms, updated_at = EXCLUDED.updated_at`,
		r.Instance, r.Name, r.Queue, r.Host, int64(r.PID), r.Status, r.Loop,
		int64(r.Wave), int64(r.Buffered), int64(r.InFlight), int64(r.BatchPending),
		r.Latched, r.Faulted, r.Fault, sqlqueue.UnixMillis(r.FaultAt), r.Rebuilds,
		sqlqueue.UnixMillis(r.LastReceive), sqlqueue.UnixMillis(r.StartedAt), sqlqueue.Millis(r.Interval))
}

// DeleteListeners implements sqlqueue.FleetDialect.
func (Dialect) DeleteListeners(n sqlqueue.Names, instance string) sqlqueue.Stmt {
	return st(`DELETE FROM `+n.Listeners+` WHERE instance_id = $1`, instance)
}

// DeleteStaleListeners implements sqlqueue.FleetDialect.
func (Dialect) DeleteStaleListeners(n sqlqueue.Names) sqlqueue.Stmt {
	return st(`DELETE FROM ` + n.Listeners + ` WHERE updated_at < ` + nowMillis + ` - 10 * interval_ms`)
}

// Listeners implements sqlqueue.FleetDialect.
func (Dialect) Listeners(n sqlqueue.Names) sqlqueue.Stmt {
	return st(`SELECT ` + sqlqueue.ListenerColumns + `, ` + nowMillis + ` FROM ` + n.Listeners + ` ORDER BY queue_table, name, instance_id`)
}

// PauseQueue implements sqlqueue.FleetDialect.
func (Dialect) PauseQueue(n sqlqueue.Names, queue, by string) sqlqueue.Stmt {
	return st(`INSERT INTO `+n.Paused+` (queue_table, paused_at, paused_by) VALUES ($1, `+nowMillis+`, $2)
ON CONFLICT (queue_table) DO NOTHING RETURNING queue_table`, queue, by)
}

// ResumeQueue implements sqlqueue.FleetDialect.
func (Dialect) ResumeQueue(n sqlqueue.Names, queue string) sqlqueue.Stmt {
	return st(`DELETE FROM `+n.Paused+` WHERE queue_table = $1 RETURNING queue_table`, queue)
}

// PausedQueues implements sqlqueue.FleetDialect.
func (Dialect) PausedQueues(n sqlqueue.Names) sqlqueue.Stmt {
	return st(`SELECT queue_table, paused_at, paused_by FROM ` + n.Paused + ` ORDER BY queue_table`)
}
