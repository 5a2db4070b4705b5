package sqlserver

import (
	"github.com/berth-go/berth/transport/sqlqueue"
)

var _ sqlqueue.FleetDialect = Dialect{}

// nowMillis is the database's UTC clock as Unix milliseconds (the fleet
// tables' time encoding). DATEDIFF_BIG needs SQL Server 2016, the dialect's
// floor (MinCompatibilityLevel).
const nowMillis = `DATEDIFF_BIG(millisecond, '19700101', SYSUTCDATETIME())`

// FleetTables implements sqlqueue.FleetDialect. SQL Server has no CREATE
// TABLE IF NOT EXISTS, hence OBJECT_ID. The listeners table's key is
// NONCLUSTERED: instance_id and name may together exceed a clustered key's
// 900 bytes (a topic of 255 and a group of 128 characters make a 384
// character name), not a nonclustered key's 1,700. With a schema set it
// also creates the schema, as VersionTable does (a pause may come before
// any subscriber).
func (d Dialect) FleetTables(n sqlqueue.Names) []sqlqueue.Stmt {
	var out []sqlqueue.Stmt
	if n.Schema != "" {
		out = append(out, st(head+`IF SCHEMA_ID(`+literal(n.Schema)+`) IS NULL
	EXEC(`+literal("CREATE SCHEMA "+d.QuoteIdent(n.Schema))+`)`))
	}
	return append(out,
		st(head+`IF OBJECT_ID(`+literal(n.Listeners)+`, N'U') IS NULL
CREATE TABLE `+n.Listeners+` (
	instance_id   nvarchar(128) NOT NULL,
	name          nvarchar(450) NOT NULL,
	queue_table   nvarchar(128) NOT NULL,
	host          nvarchar(255) NOT NULL,
	pid           bigint        NOT NULL,
	status        nvarchar(32)  NOT NULL,
	loop_state    nvarchar(32)  NOT NULL,
	wave          bigint        NOT NULL,
	buffered      bigint        NOT NULL,
	in_flight     bigint        NOT NULL,
	batch_pending bigint        NOT NULL,
	latched       bit           NOT NULL,
	faulted       bit           NOT NULL,
	fault         nvarchar(max) NOT NULL,
	fault_at      bigint        NULL,
	rebuilds      bigint        NOT NULL,
	last_receive  bigint        NULL,
	started_at    bigint        NULL,
	interval_ms   bigint        NOT NULL,
	updated_at    bigint        NOT NULL,
	PRIMARY KEY NONCLUSTERED (instance_id, name)
)`),
		st(head+`IF OBJECT_ID(`+literal(n.Paused)+`, N'U') IS NULL
CREATE TABLE `+n.Paused+` (
	queue_table nvarchar(128) NOT NULL PRIMARY KEY,
	paused_at   bigint        NOT NULL,
	paused_by   nvarchar(max) NOT NULL
)`),
	)
}

// UpsertListener implements sqlqueue.FleetDialect: an UPDATE, and an
// INSERT when it touched no row, in one batch (one round trip). Only the
// reporting subscriber writes its instance's rows, so the two cannot race
// another writer of the same key.
func (Dialect) UpsertListener(n sqlqueue.Names, r sqlqueue.ListenerRow) sqlqueue.Stmt {
	return st(head+`DECLARE @now bigint = `+nowMillis+`;
UPDATE `+n.Listeners+` SET queue_table = @p3, host = @p4, pid = @p5, status = @p6, loop_state = @p7,
	wave = @p8, buffered = @p9, in_flight = @p10, batch_pending = @p11, latched = @p12, faulted = @p13,
	fault = @p14, fault_at = @p15, rebuilds = @p16, last_receive = @p17, started_at = @p18,
	interval_ms = @p19, updated_at = @now
WHERE instance_id = @p1 AND name = @p2;
IF @@ROWCOUNT = 0
	INSERT INTO `+n.Listeners+` (`+sqlqueue.ListenerColumns+`)
	VALUES (@p1, @p2, @p3, @p4, @p5, @p6, @p7, @p8, @p9, @p10, @p11, @p12, @p13, @p14, @p15, @p16, @p17, @p18, @p19, @now);`,
		nv(r.Instance), nv(r.Name), nv(r.Queue), nv(r.Host), int64(r.PID), nv(r.Status), nv(r.Loop),
		int64(r.Wave), int64(r.Buffered), int64(r.InFlight), int64(r.BatchPending),
		r.Latched, r.Faulted, nv(r.Fault), sqlqueue.UnixMillis(r.FaultAt), r.Rebuilds,
		sqlqueue.UnixMillis(r.LastReceive), sqlqueue.UnixMillis(r.StartedAt), sqlqueue.Millis(r.Interval))
}

// DeleteListeners implements sqlqueue.FleetDialect.
func (Dialect) DeleteListeners(n sqlqueue.Names, instance string) sqlqueue.Stmt {
	return st(head+`DELETE FROM `+n.Listeners+` WHERE instance_id = @p1;`, nv(instance))
}

// DeleteStaleListeners implements sqlqueue.FleetDialect.
func (Dialect) DeleteStaleListeners(n sqlqueue.Names) sqlqueue.Stmt {
	return st(head + `DELETE FROM ` + n.Listeners + ` WHERE updated_at < ` + nowMillis + ` - 10 * interval_ms;`)
}

// Listeners implements sqlqueue.FleetDialect.
func (Dialect) Listeners(n sqlqueue.Names) sqlqueue.Stmt {
	return st(head + `SELECT ` + sqlqueue.ListenerColumns + `, ` + nowMillis + ` FROM ` + n.Listeners + ` ORDER BY queue_table, name, instance_id;`)
}

// PauseQueue implements sqlqueue.FleetDialect: one INSERT … SELECT whose
// NOT EXISTS holds its key-range lock (UPDLOCK, HOLDLOCK) to the insert, so
// two operators pausing at once insert one row and neither fails. Its
// output goes through a table variable, as every row-returning statement
// of the dialect (a bare OUTPUT fails on a table with triggers).
func (Dialect) PauseQueue(n sqlqueue.Names, queue, by string) sqlqueue.Stmt {
	return st(head+`DECLARE @t TABLE (queue_table nvarchar(128) NOT NULL);
INSERT INTO `+n.Paused+` (queue_table, paused_at, paused_by)
OUTPUT inserted.queue_table INTO @t
SELECT @p1, `+nowMillis+`, @p2
WHERE NOT EXISTS (SELECT 1 FROM `+n.Paused+` WITH (UPDLOCK, HOLDLOCK) WHERE queue_table = @p1);
SELECT queue_table FROM @t;`,
		nv(queue), nv(by))
}

// ResumeQueue implements sqlqueue.FleetDialect.
func (Dialect) ResumeQueue(n sqlqueue.Names, queue string) sqlqueue.Stmt {
	return st(head+`DECLARE @t TABLE (queue_table nvarchar(128) NOT NULL);
DELETE FROM `+n.Paused+`
OUTPUT deleted.queue_table INTO @t
WHERE queue_table = @p1;
SELECT queue_table FROM @t;`, nv(queue))
}

// PausedQueues implements sqlqueue.FleetDialect.
func (Dialect) PausedQueues(n sqlqueue.Names) sqlqueue.Stmt {
	return st(head + `SELECT queue_table, paused_at, paused_by FROM ` + n.Paused + ` ORDER BY queue_table;`)
}
