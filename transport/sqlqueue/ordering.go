package sqlqueue

// QueueUpgrader is implemented by dialects that cannot bring an existing
// queue table to the current columns with idempotent DDL alone (SQLite:
// ALTER TABLE … ADD COLUMN has no IF NOT EXISTS). When it creates or
// checks a queue, the engine runs the probe first, under the schema lock,
// and runs the upgrade statements before CreateQueue's when the probe
// answers true.
//
// The other dialects upgrade in CreateQueue itself (PostgreSQL's ADD
// COLUMN IF NOT EXISTS, SQL Server's upgradeQueue batch) and in their
// schema migrations.
type QueueUpgrader interface {
	// UpgradeQueue returns a statement answering one row with one
	// boolean — true when q's table exists and lacks a current column —
	// and the statements that add what it lacks.
	UpgradeQueue(q Queue) (probe Stmt, upgrade []Stmt)
}
